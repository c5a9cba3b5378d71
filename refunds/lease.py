"""One writer per thread, fenced.

A worker takes a ticket's lease with one conditional UPDATE that also raises the lease epoch (a
fencing token) and returns it; expiry is computed on the database's clock, never the worker's.
While the run goes a side thread renews the lease at a third of its length, on a connection whose
timeout is well under that third. A renewal that fails, errors or falls behind counts as a lost
lease at once: the run is asked to drain (`RunControl.request_drain`) and stops at the next step.

Every write and effect the worker makes for the thread is conditional on its epoch still holding
(the mirror, decisions, the ledger, the outbox claim, checkpoints through the fence in
refunds/persistence/), so a process that was paused past its lease and wakes up changes nothing.
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
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.db.models import Field
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl

from core import sql
from refunds import queries
from refunds.models import Ticket

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(eq=False)
class Lease:
    """A granted lease: who holds the thread, with which epoch, until when (locally). A ticket's
    by default; `table` names another table with the same lease columns (lease_owner,
    lease_expires_at, lease_epoch, attempts, woken_at), where `row_id` is that row's id (the
    intake's messages: grant_row)."""

    row_id: int
    thread_id: str
    owner: str
    epoch: int
    attempts: int
    seconds: float
    # Monotonic time at which the last successful grant or renewal was *sent*: the database set
    # the expiry at or after that moment, so the lease surely holds until it plus `seconds`.
    confirmed_at: float
    # What the ticket row said at the grant: enough to resume it without reading the checkpoint
    # when the mirror is exact (the previous run released cleanly: `trusted`).
    order_id: int = 0
    status: str = ""
    pending_interrupt_id: str = ""
    last_error: str = ""
    trusted: bool = False
    order_number: str = ""
    note: str = ""
    has_forks: bool = False
    refund_failed: bool = False  # a refund the processor failed waits to go back to a manager
    flow_version: int = 0  # the state shape the thread was stamped with (refunds/flow/versions.py)
    # The decisions recorded and not applied, as the grant read them (runner._open_decisions
    # takes them once; None: read them afresh).
    open_decisions: list[tuple] | None = None
    lost_reason: str = ""
    drain_reason: str = ""  # asked to stop at its next step while the lease still holds
    table: str = Ticket._meta.db_table
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
                    "%s %s: lease epoch %s lost: %s", self.table, self.row_id, self.epoch, reason
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
            elif self.drain_reason:
                control.request_drain(self.drain_reason)
        return control

    def drain(self, reason: str) -> None:
        """Stop the run at its next step though the lease still holds (the soft time limit).
        No lock: a signal handler calls this, and it may interrupt this very thread inside
        `control()`; the reason is set before the controls are read, so a control appended
        meanwhile sees it there."""
        self.drain_reason = reason
        for control in list(self._controls):
            control.request_drain(reason)

    # --- renewal ---------------------------------------------------------------------------------
    def renew(self) -> bool:
        sent = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {self.table} SET lease_expires_at = {sql.now_plus()} "
                "WHERE id = %s AND lease_epoch = %s AND lease_owner = %s",
                [self.seconds, self.row_id, self.epoch, self.owner],
            )
            won = cursor.rowcount == 1
        if won:
            self.confirmed_at = sent
        return won

    @contextmanager
    def kept_alive(self) -> Iterator[Lease]:
        """Renewed by this process's keeper thread while the block runs."""
        keeper = _keeper()
        keeper.hold(self)
        try:
            yield self
        finally:
            keeper.drop(self)

    def holds_sql(self, alias: str = "leased") -> str:
        """SQL true while this lease's epoch still holds its row; params: holds_params()."""
        return (
            f"EXISTS (SELECT 1 FROM {self.table} {alias} "
            f"WHERE {alias}.id = %s AND {alias}.lease_epoch = %s)"
        )

    def holds_params(self) -> list[Any]:
        return [self.row_id, self.epoch]

    # --- release ---------------------------------------------------------------------------------
    def release(self, **fields: Any) -> bool:
        """Give the thread back, writing `fields` (the mirror) in the same UPDATE; only while our
        epoch holds. A database that dropped our connection gets one fresh try."""
        update = {"lease_owner": "", "lease_expires_at": None, "updated_at": timezone.now()}
        update |= fields
        qs = Ticket.objects.filter(pk=self.row_id, lease_epoch=self.epoch)
        return bool(_with_reconnect(lambda: qs.update(**update)))

    def release_with_mirror(self, fields: dict[str, Any]) -> Released:
        """The end of a run that went well: write the mirror, mark it exact at this epoch and
        give the thread back, in one UPDATE. The same statement tells whether a decision or a
        fork landed meanwhile (the caller goes round again) and, for a ticket it made refunded,
        when a person approved it (the latency metric)."""
        update = {
            "lease_owner": "",
            "lease_expires_at": None,
            "updated_at": timezone.now(),
            "attempts": 0,
            "last_error": "",
            "mirror_epoch": self.epoch,
            **fields,
        }
        sets, params = [], []
        for name, value in update.items():
            column, db_field = _ticket_column(name)
            sets.append(f"{connection.ops.quote_name(column)} = %s")
            params.append(db_field.get_db_prep_save(value, connection))
        if fields.get("pending_interrupt_id"):
            # The review's clock starts when its interrupt first shows, and keeps running while
            # the same one waits (the desk's escalation timers count from it).
            sets.append(
                "review_since = CASE WHEN pending_interrupt_id = %s AND review_since IS NOT NULL "
                "THEN review_since ELSE %s END"
            )
            review_since = Ticket._meta.get_field("review_since")
            params += [
                fields["pending_interrupt_id"],
                review_since.get_db_prep_save(update["updated_at"], connection),
            ]
        approved_at = "NULL"
        if fields.get("status") == Ticket.Status.REFUNDED:
            approved_at = (
                "(SELECT max(d.decided_at) FROM refunds_decision d WHERE d.ticket_id = "
                f"refunds_ticket.id AND d.answer = {queries.APPROVE})"
            )
        waiting, waiting_params = queries.named_rule(Ticket, "answer_waiting")
        sql = (
            f"UPDATE refunds_ticket SET {', '.join(sets)} WHERE id = %s AND lease_epoch = %s "
            f"RETURNING {waiting}, {approved_at}"
        )
        params += [self.row_id, self.epoch, *waiting_params]

        def write():
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchone()

        row = _with_reconnect(write)
        if row is None:  # the epoch no longer held: nothing was written
            return Released(news=False, approved_at=None)
        return Released(news=bool(row[0]), approved_at=_as_datetime(row[1]))


def fenced(qs, lease: Lease):
    return qs.filter(ticket__lease_epoch=lease.epoch)


def _ticket_column(name: str) -> tuple[str, Field]:
    """The column a Ticket field is stored in, and the field that prepares its values."""
    found = Ticket._meta.get_field(name)
    if not isinstance(found, Field) or not found.column:  # a reverse relation has no column
        raise FieldDoesNotExist(f"Ticket.{name} is not a column")
    return found.column, found


@dataclass(frozen=True)
class Released:
    news: bool  # a decision or a fork landed while the lease was held
    approved_at: datetime | None  # set for a ticket this release made refunded


def _as_datetime(value: Any) -> datetime | None:
    """A timestamp read with raw SQL: PostgreSQL gives a datetime, SQLite the text Django stored
    (UTC)."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = parse_datetime(value)
    if parsed is None:
        raise ValueError(f"not a timestamp: {value!r}")
    return parsed.replace(tzinfo=UTC)


class _Keeper:
    """One renewal thread per process, on a connection of its own, for every lease the process
    holds: a run costs no thread start and no connection open for its renewals."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.leases: set[Lease] = set()
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, daemon=True, name="lease-keeper")
        self.thread.start()

    def hold(self, lease: Lease) -> None:
        with self.lock:
            self.leases.add(lease)
        self.changed.set()

    def drop(self, lease: Lease) -> None:
        with self.lock:
            self.leases.discard(lease)

    def stop(self) -> None:
        self.stopping = True
        self.changed.set()
        self.thread.join(timeout=10)

    def _due(self) -> float | None:
        with self.lock:
            return min(
                (lease.confirmed_at + lease.seconds / 3 for lease in self.leases), default=None
            )

    def _loop(self) -> None:
        bounded_to = None
        try:
            while not self.stopping:
                due = self._due()
                self.changed.wait(None if due is None else max(due - time.monotonic(), 0))
                self.changed.clear()
                with self.lock:
                    leases = list(self.leases)
                for lease in leases:
                    if time.monotonic() < lease.confirmed_at + lease.seconds / 3:
                        continue
                    if not lease.holds():  # fell behind (a stall): holds() marked it lost
                        self.drop(lease)
                        continue
                    try:
                        if bounded_to is None or connection.connection is not bounded_to:
                            _bound_statement_time(lease.seconds / 6)
                            bounded_to = connection.connection
                        renewed = lease.renew()
                    except Exception as exc:  # noqa: BLE001 - any failure is a lost lease
                        lease.lose(f"renewal failed: {type(exc).__name__}: {exc}")
                        self.drop(lease)
                        connection.close()
                        continue
                    if not renewed:
                        lease.lose("another worker took the thread over")
                        self.drop(lease)
        finally:
            connection.close()


_the_keeper: _Keeper | None = None
_keeper_lock = threading.Lock()


def _keeper() -> _Keeper:
    global _the_keeper
    with _keeper_lock:
        if _the_keeper is None or _the_keeper.pid != os.getpid():  # none yet, or a forked child
            _the_keeper = _Keeper()
        return _the_keeper


def stop_keeper() -> None:
    """Stop this process's renewal thread and close its connection (tests drop the database)."""
    global _the_keeper
    with _keeper_lock:
        keeper, _the_keeper = _the_keeper, None
    if keeper is not None and keeper.pid == os.getpid():
        keeper.stop()


def grant(ticket: Ticket | int, owner: str | None = None) -> Lease | None:
    """Take the thread's lease if nobody holds it and the ticket is not finished, raising its
    epoch: one UPDATE, so two workers never both win. None when that UPDATE changed nothing."""
    ticket_id = ticket if isinstance(ticket, int) else ticket.pk
    owner = owner or worker_name()
    seconds = settings.REFUNDS_LEASE_SECONDS
    sent = time.monotonic()
    grantable, grantable_params = queries.named_rule(Ticket, "grantable")
    forks, forks_params = queries.named_rule(Ticket, "fork_waiting")
    decisions, decisions_params = queries.open_decisions('"refunds_ticket"."id"')
    failed, failed_params = queries.named_rule(Ticket, "refund_failed_waiting")
    row = sql.fetchone(
        f"UPDATE refunds_ticket SET lease_owner = %s, lease_epoch = lease_epoch + 1, "
        f"lease_expires_at = {sql.now_plus()}, attempts = attempts + 1, woken_at = NULL, "
        f"status = CASE WHEN status = {queries.TICKET_NEW} THEN {queries.TICKET_RUNNING} "
        f"ELSE status END, updated_at = {sql.now()} "
        f"WHERE id = %s AND {grantable} "
        "RETURNING lease_epoch, attempts, thread_id, order_id, status, pending_interrupt_id, "
        "mirror_epoch, last_error, note, "
        "(SELECT number FROM refunds_order o WHERE o.id = refunds_ticket.order_id), "
        f"{forks}, flow_version, {decisions}, {failed}",
        [
            owner,
            seconds,
            ticket_id,
            *grantable_params,
            *forks_params,
            *decisions_params,
            *failed_params,
        ],
    )
    if row is None:
        return None
    (epoch, attempts, thread_id, order_id, status, pending, mirror_epoch, last_error) = row[:8]
    note, order_number, has_forks, flow_version, decisions, refund_failed = row[8:]
    return Lease(
        row_id=ticket_id,
        thread_id=thread_id,
        owner=owner,
        epoch=epoch,
        attempts=attempts,
        seconds=seconds,
        confirmed_at=sent,
        order_id=order_id,
        status=status,
        pending_interrupt_id=pending,
        last_error=last_error,
        trusted=mirror_epoch == epoch - 1,
        order_number=order_number,
        note=note,
        has_forks=bool(has_forks),
        refund_failed=bool(refund_failed),
        flow_version=flow_version,
        open_decisions=queries.read_open_decisions(decisions),
    )


def grant_row(
    table: str, row_id: int, *, thread_id: str, leasable: str = "1 = 1", owner: str | None = None
) -> Lease | None:
    """grant() for a row of another table with the lease columns (lease_owner, lease_expires_at,
    lease_epoch, attempts, woken_at, updated_at): one conditional UPDATE raising the epoch, only
    while nobody holds the row and `leasable` (SQL on the row) is true. None when it changed
    nothing."""
    owner = owner or worker_name()
    seconds = settings.REFUNDS_LEASE_SECONDS
    sent = time.monotonic()
    row = sql.fetchone(
        f"UPDATE {table} SET lease_owner = %s, lease_epoch = lease_epoch + 1, "
        f"lease_expires_at = {sql.now_plus()}, attempts = attempts + 1, woken_at = NULL, "
        f"updated_at = {sql.now()} "
        f"WHERE id = %s AND ({leasable}) "
        f"AND (lease_expires_at IS NULL OR lease_expires_at < {sql.now()}) "
        "RETURNING lease_epoch, attempts, last_error",
        [owner, seconds, row_id],
    )
    if row is None:
        return None
    epoch, attempts, last_error = row
    return Lease(
        row_id=row_id,
        thread_id=thread_id,
        owner=owner,
        epoch=epoch,
        attempts=attempts,
        seconds=seconds,
        confirmed_at=sent,
        last_error=last_error,
        table=table,
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
