"""Writes that views, the API, the admin and the sweep call. Tasks are enqueued on commit."""

from __future__ import annotations

import hashlib
import logging
import uuid
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from refunds import audit, permissions
from refunds.flow.state import FLOW_VERSION
from refunds.flow.words import dollars
from refunds.models import (
    AuditEvent,
    Decision,
    Email,
    Fork,
    IdempotentRequest,
    Order,
    Ticket,
)
from refunds.money import money_moved

log = logging.getLogger(__name__)
NOTE_MAX = 2000
REASON_MAX = 1000


class RefundError(ValueError):
    """Bad input or a request that no longer applies; the message is shown to the user."""


class AlreadyDecided(RefundError):
    pass


class TicketAlreadyOpen(RefundError):
    """The order has an open ticket: at most one per order. `ticket` is that one."""

    def __init__(self, ticket: Ticket):
        self.ticket = ticket
        super().__init__(
            f"Order {ticket.order.number} already has an open ticket ({ticket.pk}, "
            f"{ticket.get_status_display().lower()}); it is shown instead of a new one."
        )


def wake(ticket_id: int) -> bool:
    """Ask a worker to advance the thread. The broker only wakes workers: if it is down, the row
    is already committed and the recovery sweep finds it, so a failed send is logged, not raised."""
    from refunds.tasks import advance_ticket

    try:
        advance_ticket.delay(ticket_id)
    except Exception:  # noqa: BLE001 - kombu raises several kinds for an unreachable broker
        log.warning(
            "could not enqueue ticket %s; the recovery sweep will pick it up",
            ticket_id,
            exc_info=True,
        )
        return False
    return True


def _enqueue_advance(ticket_id: int) -> None:
    transaction.on_commit(lambda: wake(ticket_id))


def ticket_open(*, order_number: str, note: str = "", opened_by=None) -> Ticket:
    number = (order_number or "").strip()
    if not number:
        raise RefundError("Enter an order number.")
    if len(note or "") > NOTE_MAX:
        raise RefundError(f"The note is too long ({len(note)} characters, at most {NOTE_MAX}).")
    order = Order.objects.filter(number=number).first()
    if order is None:
        raise RefundError(f"There is no order {number}.")
    existing = Ticket.objects.open().filter(order=order).select_related("order").first()
    if existing is not None:
        raise TicketAlreadyOpen(existing)
    try:
        with transaction.atomic():
            ticket = Ticket.objects.create(
                thread_id=f"refund-{order.number}-{uuid.uuid4().hex[:10]}",
                order=order,
                note=(note or "").strip(),
                opened_by=opened_by if opened_by and opened_by.is_authenticated else None,
                flow_version=FLOW_VERSION,  # the shape its thread starts with (see flow/state.py)
            )
            audit.record(ticket, AuditEvent.Action.OPEN, actor=opened_by, note=ticket.note)
            _enqueue_advance(ticket.pk)
    except IntegrityError:  # two requests at once: the partial UNIQUE index let one through
        existing = Ticket.objects.open().filter(order=order).select_related("order").first()
        if existing is None:
            raise
        raise TicketAlreadyOpen(existing) from None
    return ticket


def ticket_decide(
    *, ticket: Ticket, interrupt_id: str, answer: str, reason: str = "", reviewer
) -> Decision:
    """Record a reviewer's answer to one pending interrupt, then let a worker apply it."""
    refusal = permissions.decision_refusal(reviewer, ticket)
    if refusal:
        raise PermissionDenied(refusal)
    if answer not in Decision.Answer.values:
        raise RefundError("Choose approve or reject.")
    reason = (reason or "").strip()
    if answer == Decision.Answer.REJECT and not reason:
        raise RefundError("Give a reason for the rejection; the customer is sent it.")
    if len(reason) > REASON_MAX:
        raise RefundError(f"The reason is too long (at most {REASON_MAX} characters).")
    earlier = Decision.objects.filter(interrupt_id=interrupt_id).select_related("reviewer").first()
    if earlier is not None:
        raise AlreadyDecided(_already_decided_message(earlier))
    if (
        ticket.status != Ticket.Status.AWAITING_REVIEW
        or ticket.pending_interrupt_id != interrupt_id
    ):
        raise RefundError("This review is no longer pending; reload to see where the ticket is.")
    try:
        with transaction.atomic():
            decision = Decision.objects.create(
                ticket=ticket,
                interrupt_id=interrupt_id,
                reviewer=reviewer,
                answer=answer,
                reason=reason,
            )
            audit.record(
                ticket,
                answer,
                actor=reviewer,
                seen={"interrupt_id": interrupt_id, "review": ticket.pending_payload},
                answer={"answer": answer, "reason": reason},
            )
            _enqueue_advance(ticket.pk)
    except IntegrityError:  # two reviewers at once: the UNIQUE interrupt id picks one
        earlier = Decision.objects.select_related("reviewer").get(interrupt_id=interrupt_id)
        raise AlreadyDecided(_already_decided_message(earlier)) from None
    return decision


class IdempotencyConflict(RefundError):
    pass


IDEMPOTENCY_WINDOW = timedelta(hours=24)


def idempotent(*, user, key: str, request_body: bytes, respond) -> tuple[int, dict]:
    """Answer a request made with an Idempotency-Key: the first time, call `respond()` and keep
    its (status, body); a retry with the same key and body gets the kept response, a retry with
    another body an IdempotencyConflict. The key row and whatever `respond` writes commit in one
    transaction, so two concurrent retries cannot both open a ticket: the second waits on the
    key's UNIQUE index and then reads the first one's answer."""
    digest = hashlib.sha256(request_body).hexdigest()
    IdempotentRequest.objects.filter(created_at__lt=timezone.now() - IDEMPOTENCY_WINDOW).delete()
    for _ in range(2):
        earlier = IdempotentRequest.objects.filter(user=user, key=key).first()
        if earlier is not None:
            if earlier.request_hash != digest:
                raise IdempotencyConflict(
                    "This Idempotency-Key was used with a different request body in the last "
                    "24 hours; use a new key for a new request."
                )
            return earlier.status_code, earlier.response
        try:
            with transaction.atomic():
                status, body = respond()
                IdempotentRequest.objects.create(
                    user=user, key=key, request_hash=digest, status_code=status, response=body
                )
            return status, body
        except IntegrityError:
            continue  # a concurrent request with the same key won; read its answer
    raise RefundError("The request could not be completed; try again.")


def _already_decided_message(decision: Decision) -> str:
    when = timezone.localtime(decision.decided_at).strftime("%H:%M:%S")
    verb = "approved" if decision.answer == Decision.Answer.APPROVE else "rejected"
    return f"Already decided: {decision.reviewer.username} {verb} this refund at {when}."


def tickets_recover() -> list[int]:
    """Re-enqueue every thread with work left that no worker holds and no person waits on.

    The broker is a wake-up signal, not the record: a lost message, a killed worker or a crash
    between commit and enqueue all end here."""
    now = timezone.now()
    settled_before = now - timedelta(seconds=settings.REFUNDS_SWEEP_GRACE_SECONDS)
    rewake_before = now - timedelta(seconds=settings.REFUNDS_REWAKE_SECONDS)
    ids = list(
        Ticket.objects.needing_worker(settled_before=settled_before)
        # A wake-up the sweep sent that no worker took yet is still in the queue (a backlog):
        # another copy would only lengthen it. Sent again only if it may have been lost.
        .filter(Q(woken_at__isnull=True) | Q(woken_at__lt=rewake_before))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    sent = [ticket_id for ticket_id in ids if wake(ticket_id)]
    Ticket.objects.filter(pk__in=sent).update(woken_at=now)
    if len(sent) < len(ids):
        raise BrokerUnavailable(
            f"the broker took {len(sent)} of {len(ids)} wake-ups; the rest wait for the next sweep",
            sent=len(sent),
        )
    return ids


class BrokerUnavailable(RuntimeError):
    def __init__(self, message: str, *, sent: int = 0):
        super().__init__(message)
        self.sent = sent


def email_resend(*, email_id: int, by) -> None:
    """Admin: send an undelivered email of a finished ticket again (through the outbox, once)."""
    if not permissions.is_admin(by):
        raise PermissionDenied("Only admins resend emails.")
    email = Email.objects.select_related("ticket").filter(pk=email_id).first()
    if email is None:
        raise RefundError("There is no such email.")
    if email.status == Email.Status.SENT:
        raise RefundError(f"That email was already delivered ({email.sent_at:%Y-%m-%d %H:%M}).")
    if not email.ticket.is_final:
        raise RefundError("The ticket is still running; its own run sends this email.")
    from refunds.tasks import resend_email

    with transaction.atomic():
        audit.record(
            email.ticket,
            AuditEvent.Action.RESEND,
            actor=by,
            seen={"key": email.key, "last_error": email.last_error},
        )
        transaction.on_commit(lambda: resend_email.delay(email.pk))


def ticket_retry(*, ticket: Ticket, by=None) -> bool:
    """Admin action: put a failed ticket back in line with a fresh attempt budget."""
    with transaction.atomic():
        won = Ticket.objects.filter(pk=ticket.pk, status=Ticket.Status.FAILED).update(
            status=Ticket.Status.RUNNING, attempts=0, lease_owner="", lease_expires_at=None
        )
        if won:
            audit.record(
                ticket, AuditEvent.Action.RETRY, actor=by, seen={"error": ticket.last_error}
            )
            _enqueue_advance(ticket.pk)
    return bool(won)


FORKABLE = (Ticket.Status.AWAITING_REVIEW, Ticket.Status.REJECTED, Ticket.Status.FAILED)
FORK_MAX_CENTS = 1_000_000


def ticket_fork(
    *, ticket: Ticket, amount_cents: int, reason: str, by, from_checkpoint_id: str = ""
) -> Fork:
    """Admin: fork the thread with a corrected amount, from the checkpoint named (any before the
    charge: paused before triage or at the review) or else the latest such. The Fork row is the
    audit entry; a worker applies it under the lease, then the thread is triaged and reviewed
    again (a new interrupt id, so answers to the old review are refused)."""
    if not permissions.is_admin(by):
        raise PermissionDenied("Only admins fork a thread.")
    if isinstance(amount_cents, bool) or not isinstance(amount_cents, int):
        raise RefundError("The corrected amount must be a whole number of cents.")
    if not 0 < amount_cents <= FORK_MAX_CENTS:
        raise RefundError(
            f"The corrected amount must be between $0.01 and ${FORK_MAX_CENTS // 100:,}."
        )
    if amount_cents == ticket.amount_cents:
        raise RefundError(
            f"The ticket's amount is already {dollars(amount_cents)}; a fork must change it."
        )
    reason = (reason or "").strip()
    if not reason:
        raise RefundError("Say why the thread is forked; the reason is kept with the audit entry.")
    if len(reason) > REASON_MAX:
        raise RefundError(f"The reason is too long (at most {REASON_MAX} characters).")
    charge = money_moved(ticket)
    if charge is not None:
        raise RefundError(
            f"Money already moved for this ticket (receipt {charge.receipt}); "
            "a fork cannot undo a charge."
        )
    balance = max(ticket.order.shipping_fee_cents - ticket.order.refunded_cents(), 0)
    if amount_cents > balance:
        raise RefundError(
            f"Order {ticket.order.number} has {dollars(balance)} left to refund of its "
            f"{dollars(ticket.order.shipping_fee_cents)} shipping fee; a fork cannot ask for more."
        )
    if ticket.status not in FORKABLE:
        raise RefundError(
            "Only a ticket awaiting review, rejected or failed can be forked; "
            f"this one is {ticket.get_status_display().lower()}."
        )
    try:
        with transaction.atomic():
            moved = Ticket.objects.filter(pk=ticket.pk, status__in=FORKABLE).update(
                status=Ticket.Status.RUNNING, attempts=0, last_error=""
            )
            if not moved:
                raise RefundError("The ticket moved on meanwhile; reload it and try again.")
            fork = Fork.objects.create(
                ticket=ticket,
                by=by,
                amount_cents=amount_cents,
                reason=reason,
                from_checkpoint_id=from_checkpoint_id,
            )
            audit.record(
                ticket,
                AuditEvent.Action.FORK,
                actor=by,
                seen={"amount_cents": ticket.amount_cents, "status": ticket.status},
                answer={"amount_cents": amount_cents, "from_checkpoint_id": from_checkpoint_id},
                note=reason,
            )
            _enqueue_advance(ticket.pk)
    except IntegrityError:  # reopening it would make a second open ticket for the order
        other = Ticket.objects.open().filter(order=ticket.order_id).exclude(pk=ticket.pk).first()
        raise RefundError(
            f"Order {ticket.order.number} has another open ticket ({other.pk if other else '?'});"
            " finish that one first."
        ) from None
    return fork
