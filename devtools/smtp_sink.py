"""A real SMTP server on a loopback port that counts what is delivered to it, for the tests and
`manage.py crashtest`: effects are counted where they land, not as outbox rows.

It can refuse (4xx or 5xx) the next N messages or all of them, and answer slowly, so the tests can
play a mail server that is down, flaky or hung."""

from __future__ import annotations

import asyncio
import email
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass

from aiosmtpd.controller import Controller


@dataclass
class Delivered:
    key: str
    message_id: str
    to: list[str]
    subject: str
    at: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SmtpSink:
    def __init__(self) -> None:
        self.port = free_port()
        self.delivered: list[Delivered] = []
        self.refusals = 0
        self._refuse_next = 0
        self._refuse_code = 451
        self._delay = 0.0
        self._rcpt_delay = 0.0
        self._lock = threading.Lock()
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)

    # --- aiosmtpd handler -----------------------------------------------------------------------
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options) -> str:  # noqa: N802
        with self._lock:
            delay = self._rcpt_delay
        if delay:
            await asyncio.sleep(delay)
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 - aiosmtpd's name
        with self._lock:
            delay, refuse = self._delay, self._refuse_next != 0
            if refuse:
                self.refusals += 1
                if self._refuse_next > 0:
                    self._refuse_next -= 1
            code = self._refuse_code
        if delay:
            await asyncio.sleep(delay)
        if refuse:
            return f"{code} {'4.3.0 try again later' if code < 500 else '5.7.1 not accepted'}"
        message = email.message_from_bytes(envelope.content)
        with self._lock:
            self.delivered.append(
                Delivered(
                    key=message.get("X-Refund-Key", ""),
                    message_id=message.get("Message-ID", ""),
                    to=list(envelope.rcpt_tos),
                    subject=message.get("Subject", ""),
                    at=time.time(),
                )
            )
        return "250 OK"

    # --- controls -------------------------------------------------------------------------------
    def refuse(self, count: int = -1, *, code: int = 451) -> None:
        """Refuse the next `count` messages (-1: every one until accept())."""
        with self._lock:
            self._refuse_next, self._refuse_code = count, code

    def accept(self) -> None:
        with self._lock:
            self._refuse_next = 0

    def slow(self, seconds: float, *, at: str = "end") -> None:
        """Answer slowly: at the "end" of the message (after its final "."), or at each
        "recipient" (before the message is sent at all)."""
        if at not in ("end", "recipient"):
            raise ValueError(f"slow at 'end' or 'recipient', not {at!r}")
        with self._lock:
            if at == "end":
                self._delay = seconds
            else:
                self._rcpt_delay = seconds

    def start(self) -> SmtpSink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    # --- counts ---------------------------------------------------------------------------------
    def count(self, key_prefix: str = "") -> int:
        with self._lock:
            return sum(1 for d in self.delivered if d.key.startswith(key_prefix))

    def keys(self) -> Counter:
        with self._lock:
            return Counter(d.key for d in self.delivered)

    def delivered_twice(self) -> list[str]:
        return sorted(k for k, n in self.keys().items() if n > 1)

    def env(self) -> dict[str, str]:
        """Settings that send a Django process's mail here."""
        return {
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(self.port),
        }
