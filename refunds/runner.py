"""advance(): the only code that runs, resumes, forks or updates a thread.

It takes the ticket's lease (one writer per thread, with a fencing epoch), applies a recorded fork
or decision if the thread waits on it, runs until the next interrupt or the end, and writes the
mirror in the same UPDATE that releases the lease. Every write on the way is conditional on the
epoch.

What it reads, and why so little: the checkpointer is the truth, but the mirror is exact whenever
the previous run released the lease cleanly (the release wrote `mirror_epoch`). Then a new ticket
starts without a snapshot, a decision resumes its interrupt straight from the mirror, and the new
mirror is built from the run's own stream events. The checkpointer is read only when the mirror
cannot be trusted: after a crash (a lease that lapsed), a fork, a retry.

Durability: the first leg (the checks to the review, or to the decline) has no effects and runs
with durability "exit", stopped before any node with an effect; a kill inside it re-runs only pure
nodes (tests/test_crash.py). Every run that can reach `charge_order`, `email` or `notify` is
"sync": each step's checkpoint is on disk before the next step starts.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, Now
from django.utils import timezone
from langgraph.errors import GraphDrained
from langgraph.types import Command

from core.logs import bound
from refunds import lease as leases
from refunds import metrics, mirror, money, persistence, signals
from refunds.collaborators import collaborators
from refunds.flow import versions
from refunds.flow.errors import EffectBusy
from refunds.flow.state import FLOW_VERSION, Collaborators, RefundState
from refunds.flow.words import dollars
from refunds.forks import apply_forks
from refunds.hand_back import hand_back_failed_refunds
from refunds.models import Charge, Decision, Fork, Order, Ticket, TicketOrder, resume_value
from refunds.persistence import FenceLost, graph, snapshot, thread_config

log = logging.getLogger(__name__)
MAX_RUNS_PER_ADVANCE = 8  # resume, then continue: a few invokes at most; a guard against loops
# The first leg stops before these.
EFFECT_NODES = ["received", "charge_order", "email", "notify", "ask_customer", "close_no_reply"]
_running: list[leases.Lease] = []  # the leases this process is running a thread under now
_draining: list[str] = []  # set by drain_running() until the next advance() starts


def drain_running(reason: str) -> None:
    """Ask the runs of this process to stop at their next step, checkpoint saved, and give their
    threads back (the soft time limit: refunds/tasks.py). Safe from a signal handler."""
    _draining.append(reason)
    for lease in list(_running):
        lease.drain(reason)


def advance(ticket_id: int, *, carry: bool = False) -> str:
    """Move one thread as far as it goes. Safe to call any number of times, from any worker.
    A thread of an older flow version moves only with `carry` (manage.py upgrade_threads), which
    carries it to the current version first (refunds/flow/versions.py)."""
    started = time.monotonic()
    _draining.clear()
    with bound(ticket_id=ticket_id):
        outcome = _advance(ticket_id, carry=carry)
    metrics.ADVANCES.labels(outcome=outcome).inc()
    metrics.ADVANCE_SECONDS.observe(time.monotonic() - started)
    return outcome


def _advance(ticket_id: int, *, carry: bool = False) -> str:
    lease = leases.grant(ticket_id)
    if lease is None:
        return _not_granted(ticket_id)
    if lease.flow_version < FLOW_VERSION and not carry:
        # Not a failure of the thread: it waits, not counted, until the command carries it.
        error = f"Flow version {lease.flow_version} is retired: run manage.py upgrade_threads."
        lease.release(attempts=F("attempts") - 1, last_error=error)
        return "old version"
    if lease.attempts > settings.REFUNDS_MAX_ATTEMPTS:
        return _give_up(lease)
    _running.append(lease)
    try:
        with lease.kept_alive(), bound(thread_id=lease.thread_id):
            fields = _drive(lease)
    except (GraphDrained, FenceLost) as exc:
        if lease.drain_reason and not lease.lost_reason:
            # Stopped on purpose at a step boundary, its checkpoint saved; the sweep hands the
            # thread to the next free worker.
            log.warning("ticket %s: run drained: %s", ticket_id, lease.drain_reason)
            lease.release(last_error=f"drained: {lease.drain_reason}"[:2000])
            return "drained"
        # Another worker holds the thread now (or soon will): leave everything to it.
        log.warning("ticket %s: run stopped, lease lost: %s", ticket_id, exc)
        lease.release(last_error=f"lease lost: {exc}"[:2000])
        return "lease lost"
    except EffectBusy as exc:
        # A paused or dying process is inside this thread's charge or email: not a failure of
        # this run, so it does not count against the attempts. The sweep comes back.
        lease.release(attempts=F("attempts") - 1, last_error=str(exc))
        return "busy"
    except Exception as exc:
        log.exception("ticket %s: run failed", ticket_id)
        # No checkpoint read here: after a database blip that read would hang on a dead
        # connection and keep the lease for its full length. The next run rebuilds the mirror.
        _release_after_error(lease, f"{type(exc).__name__}: {exc}")
        return "error"
    finally:
        _running.remove(lease)
    # The mirror and the release in one UPDATE, which also says whether a decision or a fork
    # landed while we held the lease.
    released = lease.release_with_mirror(fields)
    if released.news and not _draining:  # a draining process leaves the news to the sweep
        return _advance(ticket_id)
    if released.approved_at is not None:  # this release made it refunded
        waited = (timezone.now() - released.approved_at).total_seconds()
        metrics.DECISION_TO_REFUNDED_SECONDS.observe(max(waited, 0.0))
    return fields.get("status", lease.status)


def _ended_or_erased(lease: leases.Lease) -> bool:
    erased = Order.objects.filter(Q(links__ticket=lease.row_id) | Q(tickets=lease.row_id))
    return lease.status in Ticket.FINAL or erased.filter(erased_at__isnull=False).exists()


def _not_granted(ticket_id: int) -> str:
    """Why no lease was granted: the ticket is gone, finished, or another worker holds it."""
    status = Ticket.objects.filter(pk=ticket_id).values_list("status", flat=True).first()
    if status is None:
        return "missing"
    return status if status in (*Ticket.FINAL, Ticket.Status.FAILED) else "busy"


def _release_after_error(lease: leases.Lease, error: str) -> None:
    try:
        lease.release(last_error=error[:2000])
    except (OperationalError, InterfaceError):
        connection.close()
        log.exception("ticket %s: could not release the lease; it lapses", lease.row_id)


def _give_up(lease: leases.Lease) -> str:
    """The attempt cap: `failed` only when no money moved. Paid means refunded."""
    tries = lease.attempts - 1
    error = (lease.last_error or "worker died") + f" (gave up after {tries} attempts)"
    charge = money.money_moved(lease.row_id)
    if charge is None:
        lease.release(status=Ticket.Status.FAILED, last_error=error)
        metrics.FAILURES.inc()
        log.warning("ticket %s failed after %s attempts", lease.row_id, tries)
        return Ticket.Status.FAILED
    if charge.status == Charge.Status.SUCCEEDED:
        lease.release(
            status=Ticket.Status.REFUNDED,
            outcome_reason=f"Refunded {dollars(charge.amount_cents)}; the thread stopped after "
            "the payment, so check the confirmation email.",
            last_error=error,
        )
        return Ticket.Status.REFUNDED
    # A charge whose outcome is not known yet: keep trying, never call it failed.
    lease.release(attempts=F("attempts") - 1, last_error=error)
    return "error"


# --- running a thread --------------------------------------------------------------------------
def _run(lease: leases.Lease, graph_input: Any, ctx: Collaborators, *, first_leg: bool = False):
    """One graph run; returns where the thread stands, from the run's own events."""
    config = thread_config(lease.thread_id, fence=lease.epoch)
    options: dict[str, Any] = {"durability": "sync"}
    if first_leg:
        # Nothing before the review has an effect: one checkpoint at the end is enough, and the
        # run stops before any node that has one.
        options = {"durability": "exit", "interrupt_before": EFFECT_NODES}
    events = mirror.RunEvents()
    with persistence.invoked_here():
        for mode, chunk in graph().stream(
            graph_input,
            config,
            context=ctx,
            stream_mode=mirror.RunEvents.MODES,
            control=lease.control(),
            **options,
        ):
            # Between nodes (under "sync" the step's checkpoint is on disk before the next).
            for node in events.see(mode, chunk):
                signals.emit_step(lease.thread_id, f"after:{node}")
    # Nothing ran (nothing was left to run): ask the checkpointer.
    return events.outcome() or snapshot(lease.thread_id)


def initial_input(lease: leases.Lease) -> RefundState:
    # Read once, when the thread starts: from then on the state carries them.
    reason, reading = Ticket.objects.filter(pk=lease.row_id).values_list("reason", "reading").get()
    numbers = list(
        TicketOrder.objects.filter(ticket_id=lease.row_id)
        .order_by("position")
        .values_list("order__number", flat=True)
    )
    return {
        "ticket_key": lease.thread_id,
        "order_number": lease.order_number,
        "order_numbers": numbers or [lease.order_number],
        "note": lease.note,
        "reason": reason,
        "reading": reading,
        "flow_version": FLOW_VERSION,
    }


@dataclass(frozen=True)
class _Answer:
    """A recorded decision, as the resume needs it."""

    pk: int
    interrupt_id: str
    value: dict


def _open_decisions(lease: leases.Lease) -> list[tuple]:
    """The ticket's decisions not yet applied: the first time, as the grant returned them."""
    if lease.open_decisions is not None:
        rows, lease.open_decisions = lease.open_decisions, None
        return rows
    unapplied = Decision.objects.filter(ticket_id=lease.row_id).unapplied().order_by("pk")
    reviewer = Coalesce("reviewer__username", Value(""))
    fields = ("pk", "interrupt_id", "answer", "reason", reviewer, "orders", "sent_back")
    return list(unapplied.values_list(*fields))


def _taken(decision) -> bool:
    """The late guard of Undo, and the one place that holds its window (the grant reads
    decisions in their grace too): one conditional UPDATE takes the decision for applying, only
    if it is still there and past its grace, and ends its grace (Undo deletes it only while
    `apply_after` is in the future). Of an Undo and this at the same moment, one wins."""
    return bool(decision.due().update(apply_after=None))


def _settle_decisions(lease: leases.Lease, pending: set[str], answered: int | None):
    """Return the recorded decision the thread waits on, if any; close out the others."""
    chosen = None
    for row in _open_decisions(lease):
        pk, interrupt_id, answer, reason, reviewer, orders, sent_back = row
        one = leases.fenced(Decision.objects.filter(pk=pk), lease)
        if interrupt_id in pending and chosen is None and not _taken(one):
            continue  # in its grace, withdrawn by Undo, or the lease is gone: not applied
        if interrupt_id in pending and chosen is None:
            if isinstance(orders, str):  # SQLite hands JSON back as text, PostgreSQL parsed
                orders = json.loads(orders)
            value = resume_value(answer, reason, reviewer, orders, sent_back=bool(sent_back))
            chosen = _Answer(pk, interrupt_id, value)
        elif pk == answered:  # a crash after the resume landed, before we noted it
            one.update(applied_at=timezone.now())
        elif interrupt_id not in pending:
            one.update(refused_reason="The thread no longer waits on this review.")
    return chosen


def _drive(lease: leases.Lease) -> dict[str, Any]:
    """Run the thread until it waits on a person or ends; return its mirror fields (empty when
    nothing changed)."""
    ctx = collaborators(lease)
    # A thread stamped with an older state shape (only `carry` runs one) is read from the
    # checkpointer, so its values can be carried to the current shape with the run's first
    # command; its forks and failed refunds wait for the next run, on the current shape.
    old_shape = lease.flow_version < FLOW_VERSION
    state, as_mirrored = _starting_state(lease, ctx, old_shape)
    for _ in range(MAX_RUNS_PER_ADVANCE):
        if (state is None or mirror.never_started(state)) and _ended_or_erased(lease):
            return {}  # its checkpoints erased (ops/forgetting.py): never begun anew
        if state is None or mirror.never_started(state):
            state = _run(lease, initial_input(lease), ctx, first_leg=True)
            if state.interrupts:
                # The review was never shown, so no answer can be waiting: the release's own
                # UPDATE tells if one landed since.
                return mirror.fields(state)
            as_mirrored = False
            continue
        elif state.interrupts:
            answered = (state.values or {}).get("decision", {}).get("decision_id")
            decision = _settle_decisions(lease, {i.id for i in state.interrupts}, answered)
            if decision is None and old_shape and (upgrade := versions.upgrade(state.values)):
                # Carried while it waits: the paused node runs again on the current shape and
                # asks again under the same interrupt id, so a reviewer's answer still lands.
                state = _run(lease, Command(update=upgrade), ctx)
                continue
            if decision is None:
                return {} if as_mirrored else mirror.fields(state)  # waiting on a person
            state = _resumed(lease, state, decision, old_shape, ctx)
        else:
            # A thread of an older shape is carried to the current one with its run's first
            # command. Only one with nothing left to run (its next node is gone) goes on where
            # that node's work is done now: one with work reads no charge into an old answer.
            upgrade = versions.upgrade(state.values) if old_shape else {}
            work = mirror.has_work(state)
            goto = versions.resume_at(state.values | upgrade) if old_shape and not work else []
            if not (work or goto):
                return mirror.fields(state)
            carried: Command[str] | None = (
                Command(update=upgrade, goto=goto) if upgrade or goto else None
            )
            state = _run(lease, carried, ctx)
        as_mirrored = False
    raise RuntimeError(f"thread {lease.thread_id} did not settle in {MAX_RUNS_PER_ADVANCE} runs")


def _starting_state(lease: leases.Lease, ctx: Any, old_shape: bool) -> tuple[Any, bool]:
    """The thread's state to drive from, and whether it is the mirror's own (nothing to write
    back unless it moves): None on the first grant ever (the thread never ran)."""
    forks = []
    if lease.has_forks and not old_shape:  # the grant's UPDATE said so
        forks = list(
            Fork.objects.unapplied()
            .filter(ticket_id=lease.row_id)
            .select_related("by")
            .order_by("created_at")
        )
    trusted = lease.trusted and not forks and not lease.refund_failed
    if trusted and lease.epoch == 1:
        return None, False
    if trusted and lease.pending_interrupt_id and not old_shape:
        return _waiting_on(lease), True  # the mirror knows the interrupt exactly
    # The checkpointer is the truth; raise the fence first, so a paused writer of an older
    # epoch cannot add a checkpoint after we read.
    if not persistence.checkpointer().claim_fence(lease.thread_id, lease.epoch):
        raise FenceLost(f"a newer epoch than {lease.epoch} holds {lease.thread_id}")
    apply_forks(lease, forks)
    if lease.refund_failed and not old_shape:
        hand_back_failed_refunds(lease, ctx)
    state = snapshot(lease.thread_id)
    if state.metadata is not None and not state.interrupts:
        answered = (state.values or {}).get("decision", {}).get("decision_id")
        _settle_decisions(lease, set(), answered)  # after a crash: note a landed resume
    return state, False


def _resumed(lease: leases.Lease, state: Any, decision: _Answer, old_shape: bool, ctx: Any) -> Any:
    """Apply a reviewer's decision to the thread paused on its interrupt."""
    # The mirror stops saying "awaiting review" while the answer is applied, so the queue and
    # the API do not show a review whose charge is already under way.
    Ticket.objects.filter(pk=lease.row_id, lease_epoch=lease.epoch).update(
        status=Ticket.Status.RUNNING, pending_interrupt_id="", pending_payload=None
    )
    signals.emit_step(lease.thread_id, "resume")
    answer = decision.value | {"decision_id": decision.pk}
    # Keyed by interrupt id: a repeated resume can never answer a later question. A state of an
    # older shape is upgraded in the same command, before approve runs on.
    upgrade = versions.upgrade(state.values) if old_shape else {}
    command: Command[str] = Command(resume={decision.interrupt_id: answer}, update=upgrade or None)
    state = _run(lease, command, ctx)
    leases.fenced(Decision.objects.filter(pk=decision.pk), lease).update(applied_at=Now())
    return state


@dataclass(frozen=True)
class _Pending:
    id: str


def _waiting_on(lease: leases.Lease) -> mirror.Outcome:
    """The thread as the mirror knows it: paused on one interrupt. Enough to resume it; the
    resume's own events rebuild the mirror."""
    return mirror.Outcome(
        values={},
        next=("approve",),
        tasks=(),
        interrupts=(_Pending(lease.pending_interrupt_id),),
        metadata={},
    )
