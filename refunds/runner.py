"""advance(): the only code that runs, resumes, forks or updates a thread.

It takes the ticket's lease (one writer per thread, with a fencing epoch), raises the thread's
checkpoint fence to that epoch, applies a recorded fork or decision if the thread waits on it, runs
until the next interrupt or the end with durability "sync", and writes the mirror in the same
UPDATE that releases the lease. Every write on the way is conditional on the epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.db.models import F
from django.utils import timezone
from langgraph.errors import GraphDrained
from langgraph.types import Command, StateSnapshot

from refunds import lease as leases
from refunds import mail, mirror, money, persistence
from refunds.flow.errors import EffectBusy
from refunds.flow.state import FLOW_VERSION, Collaborators, RefundState
from refunds.flow.words import dollars
from refunds.models import Charge, Decision, Fork, Order, Ticket
from refunds.payments import get_gateway
from refunds.persistence import FenceLost, graph, snapshot, thread_config

log = logging.getLogger(__name__)
MAX_RUNS_PER_ADVANCE = 8  # resume, then continue: a few invokes at most; a guard against loops
# Observers of a run: called with (thread_id, event), event being "resume" or "after:<node>" once
# that node's checkpoint is on disk. Metrics and the crash tests' kill points hang here.
step_hooks: list[Callable[[str, str], None]] = []


def advance(ticket_id: int) -> str:
    """Move one thread as far as it goes. Safe to call any number of times, from any worker."""
    ticket = Ticket.objects.select_related("order").filter(pk=ticket_id).first()
    if ticket is None:
        return "missing"
    if ticket.is_final or ticket.status == Ticket.Status.FAILED:
        return ticket.status
    lease = leases.grant(ticket)
    if lease is None:
        return "busy"  # another worker is on it; it picks up anything recorded meanwhile
    if lease.attempts > settings.REFUNDS_MAX_ATTEMPTS:
        return _give_up(ticket, lease)
    try:
        with lease.kept_alive():
            if not persistence.checkpointer().claim_fence(ticket.thread_id, lease.epoch):
                raise FenceLost(f"a newer epoch than {lease.epoch} holds {ticket.thread_id}")
            fields = _drive(ticket, lease)
    except (GraphDrained, FenceLost) as exc:
        # Another worker holds the thread now (or soon will): leave everything to it.
        log.warning("ticket %s: run stopped, lease lost: %s", ticket.pk, exc)
        lease.release(last_error=f"lease lost: {exc}"[:2000])
        return "lease lost"
    except EffectBusy as exc:
        # A paused or dying process is inside this thread's charge or email: not a failure of
        # this run, so it does not count against the attempts. The sweep comes back.
        lease.release(attempts=F("attempts") - 1, last_error=str(exc))
        return "busy"
    except Exception as exc:
        log.exception("ticket %s: run failed", ticket.pk)
        # No checkpoint read here: after a database blip that read would hang on a dead
        # connection and keep the lease for its full length. The next run rebuilds the mirror.
        _release_after_error(lease, f"{type(exc).__name__}: {exc}")
        return "error"
    lease.release(attempts=0, last_error="", **fields)  # the mirror and the release in one UPDATE
    if Ticket.objects.filter(pk=ticket_id).needing_worker().exists():
        return advance(ticket_id)  # a decision or a fork landed while we held the lease
    return fields["status"]


def _release_after_error(lease: leases.Lease, error: str) -> None:
    try:
        lease.release(last_error=error[:2000])
    except (OperationalError, InterfaceError):
        connection.close()
        log.exception("ticket %s: could not release the lease; it lapses", lease.ticket_id)


def _give_up(ticket: Ticket, lease: leases.Lease) -> str:
    """The attempt cap: `failed` only when no money moved. Paid means refunded."""
    tries = lease.attempts - 1
    error = (ticket.last_error or "worker died") + f" (gave up after {tries} attempts)"
    charge = money.money_moved(ticket)
    if charge is None:
        lease.release(status=Ticket.Status.FAILED, last_error=error)
        log.warning("ticket %s failed after %s attempts", ticket.pk, tries)
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
def collaborators(ticket: Ticket, lease: leases.Lease) -> Collaborators:
    def find_order(number: str):
        order = Order.objects.filter(number=number).first()
        return order.as_facts(for_ticket=ticket.pk) if order else None

    return Collaborators(
        find_order=find_order,
        pay=partial(
            money.pay,
            gateway=get_gateway(),
            ticket_id=ticket.pk,
            order_id=ticket.order_id,
            lease=lease,
        ),
        send_mail=partial(mail.send_once, ticket_id=ticket.pk, lease=lease),
    )


def _emit(thread_id: str, event: str) -> None:
    for hook in step_hooks:
        hook(thread_id, event)


def _run(ticket: Ticket, graph_input: Any, ctx: Collaborators, lease: leases.Lease) -> None:
    config = thread_config(ticket.thread_id, fence=lease.epoch)
    for update in graph().stream(
        graph_input,
        config,
        context=ctx,
        durability="sync",
        stream_mode="updates",
        control=lease.control(),
    ):
        # Between nodes: the step's checkpoint is on disk before the next one starts.
        for node in update:
            _emit(ticket.thread_id, f"after:{node}")


def initial_input(ticket: Ticket) -> RefundState:
    return {
        "ticket_key": ticket.thread_id,
        "order_number": ticket.order.number,
        "note": ticket.note,
        "flow_version": FLOW_VERSION,
    }


def _fenced(qs, lease: leases.Lease):
    return qs.filter(ticket__lease_epoch=lease.epoch)


def _settle_decisions(ticket: Ticket, snap: StateSnapshot, lease: leases.Lease) -> Decision | None:
    """Return the recorded decision the thread waits on, if any; close out the others."""
    pending = {i.id for i in snap.interrupts}
    answered = (snap.values or {}).get("decision", {}).get("decision_id")
    chosen = None
    for decision in Decision.objects.filter(ticket=ticket, applied_at=None, refused_reason=""):
        one = _fenced(Decision.objects.filter(pk=decision.pk), lease)
        if decision.interrupt_id in pending and chosen is None:
            chosen = decision
        elif decision.pk == answered:  # a crash after the resume landed, before we noted it
            one.update(applied_at=timezone.now())
        elif decision.interrupt_id not in pending:
            one.update(refused_reason="The thread no longer waits on this review.")
    return chosen


def _apply_forks(ticket: Ticket, lease: leases.Lease) -> None:
    """Apply an admin's recorded fork: a new checkpoint branched from the one before triage,
    with the corrected amount. Under the lease and its fence, like every other write."""
    for fork in Fork.objects.filter(ticket=ticket, applied_at=None, refused_reason=""):
        one = _fenced(Fork.objects.filter(pk=fork.pk), lease)
        current = snapshot(ticket.thread_id)
        if (current.values or {}).get("fork_id") == fork.pk:  # a crash after update_state
            one.update(applied_at=timezone.now())
            continue
        base = next(
            (s for s in persistence.history(ticket.thread_id) if s.next == ("triage",)), None
        )
        refusal = ""
        charge = money.money_moved(ticket)
        if charge is not None:
            refusal = "Money moved before the fork could be applied; nothing was changed."
        elif base is None:
            refusal = "The thread never reached triage, so it has no amount to correct."
        if refusal:
            one.update(refused_reason=refusal)
            continue
        previous = (current.values or {}).get("amount_cents")
        update: RefundState = {
            "amount_cents": fork.amount_cents,
            "forks": base.values.get("forks", 0) + 1,
            "fork_id": fork.pk,
            "payment_error": "",
            "notes": [
                f"Forked by {fork.by.username}: amount set to {dollars(fork.amount_cents)}"
                f" ({fork.reason})."
            ],
        }
        config = {"configurable": {**base.config["configurable"], "fence": lease.epoch}}
        # As if check_policy wrote it: its router sends the fork to triage, which re-decides
        # who reviews the corrected amount. (triage routes by Command, which update_state
        # cannot replay, so the fork starts one step earlier.)
        graph().update_state(config, update, as_node="check_policy")
        one.update(
            applied_at=timezone.now(),
            from_checkpoint_id=base.config["configurable"]["checkpoint_id"],
            previous_amount_cents=previous,
        )


def _drive(ticket: Ticket, lease: leases.Lease) -> dict[str, Any]:
    """Run the thread until it waits on a person or ends; return its mirror fields."""
    ctx = collaborators(ticket, lease)
    _apply_forks(ticket, lease)
    snap = snapshot(ticket.thread_id)
    if snap.metadata is not None and not snap.interrupts:
        _settle_decisions(ticket, snap, lease)  # after a crash: note a landed resume, refuse rest
    for _ in range(MAX_RUNS_PER_ADVANCE):
        if mirror.never_started(snap):
            _run(ticket, initial_input(ticket), ctx, lease)
        elif snap.interrupts:
            decision = _settle_decisions(ticket, snap, lease)
            if decision is None:
                return mirror.fields(snap)  # waiting on a person
            # The mirror stops saying "awaiting review" while the answer is applied, so the
            # queue and the API do not show a review whose charge is already under way.
            Ticket.objects.filter(pk=ticket.pk, lease_epoch=lease.epoch).update(
                status=Ticket.Status.RUNNING, pending_interrupt_id="", pending_payload=None
            )
            _emit(ticket.thread_id, "resume")
            answer = decision.as_resume_value() | {"decision_id": decision.pk}
            # Keyed by interrupt id: a repeated resume can never answer a later question.
            _run(ticket, Command(resume={decision.interrupt_id: answer}), ctx, lease)
            _fenced(Decision.objects.filter(pk=decision.pk), lease).update(
                applied_at=timezone.now()
            )
        elif mirror.has_work(snap):
            _run(ticket, None, ctx, lease)
        else:
            return mirror.fields(snap)
        snap = snapshot(ticket.thread_id)
    raise RuntimeError(f"thread {ticket.thread_id} did not settle in {MAX_RUNS_PER_ADVANCE} runs")
