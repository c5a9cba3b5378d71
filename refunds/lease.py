"""One writer per thread, fenced.

A worker takes a ticket's lease with one conditional UPDATE that also raises the lease epoch (a
fencing token) and returns it; expiry is computed on the database's clock, never the worker's.
While the run goes a side thread renews the lease at a third of its length, on a connection whose
timeout is well under that third. A renewal that fails, errors or falls behind counts as a lost
lease at once: the run is asked to drain (`RunControl.request_drain`) and stops at the next step.

Every write and effect the worker makes for the thread is conditional on its epoch still holding
(the mirror, decisions, the ledger, the outbox claim, checkpoints through the fence in
refunds/persistence.py), so a process that was paused past its lease and wakes up changes nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl

from refunds.models import Ticket

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _sql_now() -> str:
    if connection.vendor == "postgresql":
        return "now()"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def _sql_now_plus() -> str:
    """The database clock plus %s seconds."""
    if connection.vendor == "postgresql":
        return "now() + make_interval(secs => %s)"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || %s || ' seconds')"


@dataclass
class Lease:
    """A granted lease: who holds the thread, with which epoch, until when (locally)."""

    ticket_id: int
    thread_id: str
    owner: str
    epoch: int
    attempts: int
    seconds: float
    # Monotonic time at which the last successful grant or renewal was *sent*: the database set
    # the expiry at or after that moment, so the lease surely holds until it plus `seconds`.
    confirmed_at: float
    lost_reason: str = ""
    _controls: list[RunControl] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- is it still ours? -----------------------------------------------------------------------
    def holds(self) -> bool:
        """True while the lease surely holds: not lost, and renewed recently enough. A process that
        was paused past the lease sees False the moment it runs again."""
        if self.lost_reason:
            return False
        if time.monotonic() > self.confirmed_at + self.seconds * 2 / 3:
            self.lose("the lease was not renewed in time (the process stalled)")
            return False
        return True

    def check(self) -> None:
        """Before an effect: stop the run (a cooperative drain, nothing written) unless it holds."""
        if not self.holds():
            raise GraphDrained(f"lease on {self.thread_id} lost: {self.lost_reason}")

    def lose(self, reason: str) -> None:
        with self._lock:
            if not self.lost_reason:
                self.lost_reason = reason
                log.warning(
                    "ticket %s: lease epoch %s lost: %s", self.ticket_id, self.epoch, reason
                )
            for control in self._controls:
                control.request_drain(f"lease lost: {reason}")

    def control(self) -> RunControl:
        """A fresh RunControl for one graph run, drained as soon as the lease is lost."""
        control = RunControl()
        with self._lock:
            self._controls.append(control)
            if self.lost_reason:
                control.request_drain(f"lease lost: {self.lost_reason}")
        return control

    # --- renewal ---------------------------------------------------------------------------------
    def renew(self) -> bool:
        sent = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE refunds_ticket SET lease_expires_at = {_sql_now_plus()} "
                "WHERE id = %s AND lease_epoch = %s AND lease_owner = %s",
                [self.seconds, self.ticket_id, self.epoch, self.owner],
            )
            won = cursor.rowcount == 1
        if won:
            self.confirmed_at = sent
        return won

    def _renew_loop(self, stop: threading.Event) -> None:
        try:
            _bound_statement_time(self.seconds / 6)
            while not stop.wait(self.seconds / 3):
                if not self.holds():
                    return  # fell behind: holds() marked it lost
                try:
                    renewed = self.renew()
                except Exception as exc:  # noqa: BLE001 - any failure to renew is a lost lease
                    self.lose(f"renewal failed: {type(exc).__name__}: {exc}")
                    return
                if not renewed:
                    self.lose("another worker took the thread over")
                    return
        finally:
            connection.close()

    @contextmanager
    def kept_alive(self) -> Iterator[Lease]:
        stop = threading.Event()
        beat = threading.Thread(
            target=self._renew_loop, args=(stop,), daemon=True, name="lease-renew"
        )
        beat.start()
        try:
            yield self
        finally:
            stop.set()
            beat.join()

    # --- release ---------------------------------------------------------------------------------
    def release(self, **fields: Any) -> bool:
        """Give the thread back, writing `fields` (the mirror) in the same UPDATE; only while our
        epoch holds. A database that dropped our connection gets one fresh try."""
        update = {"lease_owner": "", "lease_expires_at": None, "updated_at": timezone.now()}
        update |= fields
        qs = Ticket.objects.filter(pk=self.ticket_id, lease_epoch=self.epoch)
        return bool(_with_reconnect(lambda: qs.update(**update)))


def grant(ticket: Ticket, owner: str | None = None) -> Lease | None:
    """Take the thread's lease if nobody holds it, raising its epoch: one UPDATE, so two workers
    never both win. None when another worker holds it."""
    owner = owner or worker_name()
    seconds = settings.REFUNDS_LEASE_SECONDS
    sent = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE refunds_ticket SET lease_owner = %s, lease_epoch = lease_epoch + 1, "
            f"lease_expires_at = {_sql_now_plus()}, attempts = attempts + 1, woken_at = NULL, "
            "status = CASE WHEN status = 'new' THEN 'running' ELSE status END, "
            f"updated_at = {_sql_now()} "
            "WHERE id = %s AND (lease_expires_at IS NULL OR lease_expires_at < "
            f"{_sql_now()}) RETURNING lease_epoch, attempts",
            [owner, seconds, ticket.pk],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    epoch, attempts = row
    return Lease(
        ticket_id=ticket.pk,
        thread_id=ticket.thread_id,
        owner=owner,
        epoch=epoch,
        attempts=attempts,
        seconds=seconds,
        confirmed_at=sent,
    )


def _bound_statement_time(seconds: float) -> None:
    """Make this thread's connection give up on a statement (or a lock) after `seconds`."""
    connection.ensure_connection()
    millis = max(int(seconds * 1000), 50)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SET statement_timeout = {millis}")
            cursor.execute(f"SET lock_timeout = {millis}")
        else:
            cursor.execute(f"PRAGMA busy_timeout = {millis}")


def _with_reconnect(write, *, tries: int = 3):
    """Run a write; if the database dropped this connection, open a new one and try again."""
    from django.db import InterfaceError, OperationalError

    for attempt in range(tries):
        try:
            return write()
        except (OperationalError, InterfaceError):
            if attempt == tries - 1 or connection.in_atomic_block:
                raise
            connection.close()
            time.sleep(0.1 * (attempt + 1))
    return None
