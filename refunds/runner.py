"""The only module that compiles the graph with a checkpointer and touches threads.

advance() is the one way a thread moves: it takes the ticket's lease (one writer per thread),
applies a recorded decision if the thread waits on it, runs until the next interrupt or the end
with durability "sync", and rebuilds the Ticket mirror from the checkpoint.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import uuid
from contextlib import contextmanager
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, connections
from django.utils import timezone
from langgraph.types import Command, StateSnapshot
from psycopg.conninfo import make_conninfo

from refunds import faults
from refunds.graph import build_graph
from refunds.mail import send_once
from refunds.models import Charge, Decision, Fork, Order, Ticket
from refunds.payments import get_gateway
from refunds.state import FLOW_VERSION, Collaborators, RefundState

log = logging.getLogger(__name__)
MAX_RUNS_PER_ADVANCE = 8  # resume, then continue: a few invokes at most; a guard against loops


# --- checkpointer and store --------------------------------------------------------------------
def checkpoint_url() -> str:
    if settings.CHECKPOINT_URL:
        return settings.CHECKPOINT_URL
    db = connections["default"].settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}-checkpoints"
    return make_conninfo(
        dbname=db["NAME"],
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
    )


def _open_sqlite(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


@cache
def _persistence(pid: int) -> tuple[Any, Any]:
    """(checkpointer, store) for this process; keyed by pid so a forked pool child opens its own."""
    url = checkpoint_url()
    if url.startswith("sqlite:///"):
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite:///")
        return SqliteSaver(_open_sqlite(path)), SqliteStore(_open_sqlite(path))
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=settings.CHECKPOINT_POOL_SIZE,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=True,
    )
    return PostgresSaver(pool), PostgresStore(pool)


def setup_persistence() -> None:
    """Create the checkpoint and store tables. Run once at deploy (migrate runs it), never by
    workers racing each other on an empty schema."""
    saver, store = _persistence(os.getpid())
    saver.setup()
    store.setup()


def close_persistence() -> None:
    """Close this process's checkpoint connections (a test run drops its database after)."""
    if _persistence.cache_info().currsize:
        saver, store = _persistence(os.getpid())
        for conn in {id(saver.conn): saver.conn, id(store.conn): store.conn}.values():
            conn.close()  # one shared pool on PostgreSQL, two connections on SQLite
    _persistence.cache_clear()
    _compiled.cache_clear()


@cache
def _compiled(pid: int):
    saver, store = _persistence(pid)
    return build_graph().compile(checkpointer=saver, store=store)


def graph():
    return _compiled(os.getpid())


def thread_config(ticket: Ticket) -> dict:
    return {"configurable": {"thread_id": ticket.thread_id}}


def snapshot(ticket: Ticket) -> StateSnapshot:
    return graph().get_state(thread_config(ticket))


def history(ticket: Ticket) -> list[StateSnapshot]:
    return list(graph().get_state_history(thread_config(ticket)))


# --- the mirror --------------------------------------------------------------------------------
def has_work(snap: StateSnapshot) -> bool:
    # After a hard kill `next` alone can be empty although the run is unfinished: read tasks too.
    return bool(snap.next or snap.tasks)


def never_started(snap: StateSnapshot) -> bool:
    return snap.metadata is None


def mirror_fields(snap: StateSnapshot) -> dict:
    values: RefundState = snap.values or {}
    fields: dict[str, Any] = {
        "nodes_run": list(values.get("trail", [])),
        "next_nodes": list(snap.next),
        "amount_cents": values.get("amount_cents"),
        "pending_interrupt_id": "",
        "pending_payload": None,
        "outcome_reason": values.get("outcome_reason", ""),
    }
    if snap.interrupts:
        pending = snap.interrupts[0]
        fields |= {
            "status": Ticket.Status.AWAITING_REVIEW,
            "pending_interrupt_id": pending.id,
            "pending_payload": pending.value,
            "required_role": pending.value.get("required_role", ""),
        }
    elif never_started(snap):
        fields["status"] = Ticket.Status.NEW
    elif has_work(snap):
        fields["status"] = Ticket.Status.RUNNING
    else:
        fields |= {
            "status": values.get("outcome", Ticket.Status.FAILED),
            "outcome_reason": values.get("outcome_reason", ""),
        }
    return fields


def sync_mirror(ticket: Ticket, owner: str | None = None) -> dict:
    """Rebuild the Ticket row from the checkpoint, the source of truth."""
    fields = mirror_fields(snapshot(ticket))
    qs = Ticket.objects.filter(pk=ticket.pk)
    if owner is not None:
        qs = qs.filter(lease_owner=owner)  # a worker that lost its lease must not overwrite
    qs.update(**fields, updated_at=timezone.now())
    return fields


# --- the lease ---------------------------------------------------------------------------------
def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """Held while a thread runs and renewed at a third of its length from a side thread."""

    def __init__(self, ticket: Ticket, owner: str):
        self.ticket, self.owner = ticket, owner
        self.seconds = settings.REFUNDS_LEASE_SECONDS
        self.lost = threading.Event()
        self._stop = threading.Event()

    def still_owner(self) -> bool:
        return not self.lost.is_set()

    def _renew_loop(self) -> None:
        try:
            while not self._stop.wait(self.seconds / 3):
                if not self.ticket.renew_lease(self.owner, self.seconds):
                    self.lost.set()
                    return
        finally:
            connection.close()

    @contextmanager
    def kept_alive(self):
        beat = threading.Thread(target=self._renew_loop, daemon=True, name="lease-renew")
        beat.start()
        try:
            yield self
        finally:
            self._stop.set()
            beat.join()

    def release(self, *, progressed: bool, error: str = "", **fields: Any) -> None:
        update: dict[str, Any] = {
            "lease_owner": "",
            "lease_expires_at": None,
            "updated_at": timezone.now(),
            **fields,
        }
        if progressed:
            update |= {"attempts": 0, "last_error": ""}
        elif error:
            update["last_error"] = error[:2000]
        Ticket.objects.filter(pk=self.ticket.pk, lease_owner=self.owner).update(**update)


# --- running a thread --------------------------------------------------------------------------
def collaborators(lease: Lease | None = None) -> Collaborators:
    def find_order(number: str):
        order = Order.objects.filter(number=number).first()
        return order.as_facts() if order else None

    return Collaborators(
        find_order=find_order,
        gateway=get_gateway(),
        mailer=send_once,
        crash_point=faults.crash_point,
        still_owner=lease.still_owner if lease else (lambda: True),
    )


def _run(ticket: Ticket, graph_input: Any, ctx: Collaborators) -> None:
    config = thread_config(ticket)
    for update in graph().stream(
        graph_input, config, context=ctx, durability="sync", stream_mode="updates"
    ):
        # Between nodes: the step's checkpoint is on disk before the next one starts.
        for node in update:
            faults.crash_point(ticket.thread_id, f"after:{node}")


def initial_input(ticket: Ticket) -> RefundState:
    return {
        "ticket_key": ticket.thread_id,
        "order_number": ticket.order.number,
        "note": ticket.note,
        "flow_version": FLOW_VERSION,
    }


def _settle_decisions(ticket: Ticket, snap: StateSnapshot) -> Decision | None:
    """Return the recorded decision the thread waits on, if any; close out the others."""
    pending = {i.id for i in snap.interrupts}
    answered = (snap.values or {}).get("decision", {}).get("decision_id")
    chosen = None
    for decision in Decision.objects.filter(ticket=ticket, applied_at=None, refused_reason=""):
        if decision.interrupt_id in pending and chosen is None:
            chosen = decision
        elif decision.pk == answered:  # a crash after the resume landed, before we noted it
            Decision.objects.filter(pk=decision.pk).update(applied_at=timezone.now())
        elif decision.interrupt_id not in pending:
            Decision.objects.filter(pk=decision.pk).update(
                refused_reason="The thread no longer waits on this review."
            )
    return chosen


def _apply_forks(ticket: Ticket) -> None:
    """Apply an admin's recorded fork: a new checkpoint branched from the one before triage,
    with the corrected amount. Under the lease, like every other write to the thread."""
    for fork in Fork.objects.filter(ticket=ticket, applied_at=None, refused_reason=""):
        current = snapshot(ticket)
        if (current.values or {}).get("fork_id") == fork.pk:  # a crash after update_state
            Fork.objects.filter(pk=fork.pk).update(applied_at=timezone.now())
            continue
        base = next((s for s in history(ticket) if s.next == ("triage",)), None)
        refusal = ""
        if Charge.objects.filter(ticket=ticket).exists():
            refusal = "Money moved before the fork could be applied; nothing was changed."
        elif base is None:
            refusal = "The thread never reached triage, so it has no amount to correct."
        if refusal:
            Fork.objects.filter(pk=fork.pk).update(refused_reason=refusal)
            continue
        previous = (current.values or {}).get("amount_cents")
        update: RefundState = {
            "amount_cents": fork.amount_cents,
            "forks": base.values.get("forks", 0) + 1,
            "fork_id": fork.pk,
            "payment_error": "",
            "notes": [
                f"Forked by {fork.by.username}: amount set to ${fork.amount_cents / 100:,.2f}"
                f" ({fork.reason})."
            ],
        }
        # As if check_policy wrote it: its router sends the fork to triage, which re-decides
        # who reviews the corrected amount. (triage routes by Command, which update_state
        # cannot replay, so the fork starts one step earlier.)
        graph().update_state(base.config, update, as_node="check_policy")
        Fork.objects.filter(pk=fork.pk).update(
            applied_at=timezone.now(),
            from_checkpoint_id=base.config["configurable"]["checkpoint_id"],
            previous_amount_cents=previous,
        )


def _drive(ticket: Ticket, lease: Lease) -> StateSnapshot:
    """Run the thread until it waits on a person or ends; return its last snapshot."""
    ctx = collaborators(lease)
    _apply_forks(ticket)
    snap = snapshot(ticket)
    if snap.metadata is not None and not snap.interrupts:
        _settle_decisions(ticket, snap)  # after a crash: note a resume that landed, refuse the rest
    for _ in range(MAX_RUNS_PER_ADVANCE):
        if never_started(snap):
            _run(ticket, initial_input(ticket), ctx)
        elif snap.interrupts:
            decision = _settle_decisions(ticket, snap)
            if decision is None:
                return snap  # waiting on a person
            # The mirror stops saying "awaiting review" while the answer is applied, so the
            # queue and the API do not show a review whose charge is already under way.
            Ticket.objects.filter(pk=ticket.pk, lease_owner=lease.owner).update(
                status=Ticket.Status.RUNNING, pending_interrupt_id="", pending_payload=None
            )
            faults.crash_point(ticket.thread_id, "resume")
            answer = decision.as_resume_value() | {"decision_id": decision.pk}
            # Keyed by interrupt id: a repeated resume can never answer a later question.
            _run(ticket, Command(resume={decision.interrupt_id: answer}), ctx)
            Decision.objects.filter(pk=decision.pk).update(applied_at=timezone.now())
        elif has_work(snap):
            _run(ticket, None, ctx)
        else:
            return snap
        snap = snapshot(ticket)
    raise RuntimeError(f"thread {ticket.thread_id} did not settle in {MAX_RUNS_PER_ADVANCE} runs")


def advance(ticket_id: int) -> str:
    """Move one thread as far as it goes. Safe to call any number of times, from any worker."""
    ticket = Ticket.objects.select_related("order").filter(pk=ticket_id).first()
    if ticket is None:
        return "missing"
    if ticket.is_final or ticket.status == Ticket.Status.FAILED:
        return ticket.status
    owner = worker_name()
    if not ticket.try_lease(owner, settings.REFUNDS_LEASE_SECONDS):
        return "busy"  # another worker is on it; it will pick up anything recorded meanwhile
    lease = Lease(ticket, owner)
    # What our UPDATE made it; a concurrent lease in between could only shift the cap by one.
    attempts = ticket.attempts + 1
    if attempts > settings.REFUNDS_MAX_ATTEMPTS:
        lease.release(
            progressed=False,
            status=Ticket.Status.FAILED,
            last_error=(ticket.last_error or "worker died")
            + f" (gave up after {attempts - 1} attempts)",
        )
        log.warning("ticket %s failed after %s attempts", ticket.pk, attempts - 1)
        return Ticket.Status.FAILED
    try:
        with lease.kept_alive():
            snap = _drive(ticket, lease)
    except Exception as exc:
        log.exception("ticket %s: run failed", ticket.pk)
        fields = mirror_fields(snapshot(ticket))
        lease.release(progressed=False, error=f"{type(exc).__name__}: {exc}", **fields)
        return "error"
    fields = mirror_fields(snap)
    lease.release(progressed=True, **fields)  # the mirror and the release in one UPDATE
    if (
        Decision.objects.filter(ticket=ticket, applied_at=None, refused_reason="").exists()
        or Fork.objects.filter(ticket=ticket, applied_at=None, refused_reason="").exists()
    ):
        return advance(ticket_id)  # a decision or a fork landed while we held the lease
    return fields["status"]
