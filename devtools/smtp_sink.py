"""A real SMTP server on a loopback port that counts what is delivered to it, for the tests and
`manage.py crashtest`: effects are counted where they land, not as outbox rows.

It can refuse (4xx or 5xx) the next N messages or all of them, and answer slowly (every message or
only some keys), so the tests can play a mail server that is down, flaky or hung. For every message
it keeps when the final "." arrived and when it answered: a crash test tells from these whether a
sender died while the server held its message and had not answered yet."""

from __future__ import annotations

import asyncio
import email
import email.header
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
    at: float  # when the server answered 250 (time.time())
    ended_at: float = 0.0  # when the final "." of the message arrived
    body: str = ""  # the text the customer reads, decoded
    in_reply_to: str = ""  # the threading headers a mail client groups a conversation by
    references: str = ""
    reply_to: str = ""  # where the customer's reply goes (a question's carries its token)


@dataclass
class Ended:
    """A message whose final "." arrived, accepted or not: its answer is `code`, at `answered_at`
    (0 while the server is still holding its answer back)."""

    key: str
    at: float
    code: int = 0
    answered_at: float = 0.0


def _text(message: email.message.Message) -> str:
    """The message's text part as its reader sees it (transfer encoding and charset undone)."""
    part = next((p for p in message.walk() if p.get_content_type() == "text/plain"), None)
    if part is None:
        return ""
    raw = part.get_payload(decode=True)
    if not isinstance(raw, bytes):
        return ""
    return raw.decode(part.get_content_charset() or "utf-8", errors="replace")


def _header(value: str) -> str:
    """A header as its reader sees it (RFC 2047's encoded words undone: "À propos de ...")."""
    return str(email.header.make_header(email.header.decode_header(value)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SmtpSink:
    def __init__(self) -> None:
        self.port = free_port()
        self.delivered: list[Delivered] = []
        self.ended: list[Ended] = []
        self.refusals = 0
        self._refuse_next = 0
        self._refuse_code = 451
        self._delay = 0.0
        self._delay_keys = ""
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
        # aiosmtpd calls this once the final "." arrived: the sender has handed the message over.
        message = email.message_from_bytes(envelope.content)
        key = message.get("X-Refund-Key", "")
        ended = Ended(key=key, at=time.time())
        with self._lock:
            self.ended.append(ended)
            delay = self._delay if key.startswith(self._delay_keys) else 0.0
            refuse = self._refuse_next != 0
            if refuse:
                self.refusals += 1
                if self._refuse_next > 0:
                    self._refuse_next -= 1
            code = self._refuse_code
        if delay:
            await asyncio.sleep(delay)
        with self._lock:
            ended.answered_at = time.time()
            ended.code = code if refuse else 250
            if not refuse:
                self.delivered.append(
                    Delivered(
                        key=key,
                        message_id=message.get("Message-ID", ""),
                        to=list(envelope.rcpt_tos),
                        subject=_header(message.get("Subject", "")),
                        at=ended.answered_at,
                        ended_at=ended.at,
                        body=_text(message),
                        in_reply_to=message.get("In-Reply-To", ""),
                        references=" ".join(message.get("References", "").split()),
                        reply_to=message.get("Reply-To", ""),
                    )
                )
        if refuse:
            return f"{code} {'4.3.0 try again later' if code < 500 else '5.7.1 not accepted'}"
        return "250 OK"

    # --- controls -------------------------------------------------------------------------------
    def refuse(self, count: int = -1, *, code: int = 451) -> None:
        """Refuse the next `count` messages (-1: every one until accept())."""
        with self._lock:
            self._refuse_next, self._refuse_code = count, code

    def accept(self) -> None:
        with self._lock:
            self._refuse_next = 0

    def slow(self, seconds: float, *, at: str = "end", key_prefix: str = "") -> None:
        """Answer slowly: at the "end" of the message (after its final "."; only messages whose
        key starts with `key_prefix`), or at each "recipient" (before the message is sent)."""
        if at not in ("end", "recipient"):
            raise ValueError(f"slow at 'end' or 'recipient', not {at!r}")
        if key_prefix and at != "end":
            raise ValueError("a key is known only at the end of the message")
        with self._lock:
            if at == "end":
                self._delay, self._delay_keys = seconds, key_prefix
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

    def ended_for(self, key_prefix: str = "") -> list[Ended]:
        """Messages whose final "." arrived (answered or still held), oldest first."""
        with self._lock:
            return [e for e in self.ended if e.key.startswith(key_prefix)]

    def delivered_twice(self) -> list[str]:
        return sorted(k for k, n in self.keys().items() if n > 1)

    def env(self) -> dict[str, str]:
        """Settings that send a Django process's mail here."""
        return {
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(self.port),
        }
