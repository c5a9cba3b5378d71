"""Writes that views, the API, the admin and the sweep call. Tasks are enqueued on commit."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.clock import local_words
from refunds import audit, permissions
from refunds.flow.state import FLOW_VERSION
from refunds.flow.words import dollars
from refunds.models import (
    AuditEvent,
    CannedReason,
    Decision,
    Email,
    Fork,
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


class ClaimTaken(RefundError):
    """A colleague holds a live claim on this review."""


ANSWERS = ("approve", "reject")


def _claim_window() -> timedelta:
    return timedelta(seconds=settings.REFUNDS_CLAIM_SECONDS)


def _claimable(now):
    return (
        Q(claimed_by__isnull=True) | Q(claim_expires_at__isnull=True) | Q(claim_expires_at__lte=now)
    )


def _taken_message(ticket_id: int) -> str:
    row = Ticket.objects.select_related("claimed_by", "order").get(pk=ticket_id)
    holder = row.claim_holder()
    who = holder.username if holder else "a colleague"
    until = local_words(row.claim_expires_at) if holder else ""
    return f"Already taken: {who} is looking at the review of order {row.order.number}" + (
        f" (their claim lapses at {until} if they leave it)." if until else "."
    )


def review_claim(*, ticket: Ticket, by) -> Ticket:
    """ "Assign to me": take the review with one conditional UPDATE, so of two people clicking at
    once exactly one wins; the other gets ClaimTaken naming who has it. Claiming one's own live
    claim again renews it."""
    refusal = permissions.decision_refusal(by, ticket)
    if refusal:
        raise PermissionDenied(refusal)
    now = timezone.now()
    with transaction.atomic():
        won = (
            Ticket.objects.filter(
                pk=ticket.pk,
                status=Ticket.Status.AWAITING_REVIEW,
                pending_interrupt_id=ticket.pending_interrupt_id,
            )
            .filter(_claimable(now) | Q(claimed_by=by))
            .update(claimed_by=by, claim_expires_at=now + _claim_window())
        )
        if won:
            audit.record(
                ticket,
                AuditEvent.Action.CLAIM,
                actor=by,
                seen={"interrupt_id": ticket.pending_interrupt_id},
                answer={"until": (now + _claim_window()).isoformat()},
            )
    if not won:
        fresh = Ticket.objects.filter(pk=ticket.pk).values_list("status", flat=True).first()
        if fresh != Ticket.Status.AWAITING_REVIEW:
            raise RefundError("This review is no longer pending; reload to see where it is.")
        raise ClaimTaken(_taken_message(ticket.pk))
    ticket.refresh_from_db()
    return ticket


def review_unclaim(*, ticket: Ticket, by) -> bool:
    """Give a claimed review back to the queue. The claimer does it; an admin or a manager may
    release a colleague's claim (someone went home holding one)."""
    qs = Ticket.objects.filter(pk=ticket.pk, claimed_by__isnull=False)
    if not (permissions.is_admin(by) or permissions.is_manager(by)):
        qs = qs.filter(claimed_by=by)
    with transaction.atomic():
        holder = ticket.claimed_by_id
        won = qs.update(claimed_by=None, claim_expires_at=None)
        if won:
            audit.record(
                ticket,
                AuditEvent.Action.UNCLAIM,
                actor=by,
                seen={"claimed_by": holder, "interrupt_id": ticket.pending_interrupt_id},
            )
    if not won:
        raise RefundError("You do not hold a claim on this review.")
    return True


def ticket_decide(
    *,
    ticket: Ticket,
    interrupt_id: str,
    answer: str,
    reason: str = "",
    reviewer,
    note: str = "",
    amount_cents: int | None = None,
    canned: CannedReason | None = None,
) -> Decision:
    """Record a reviewer's answer to one pending interrupt, then let a worker apply it.

    `reason` (with a canned reason in front of it) goes to the customer; `note` stays on the
    desk. `amount_cents` makes an approval an "edit": a manager pays less than asked."""
    if answer not in ANSWERS:
        raise RefundError("Choose approve or reject.")
    reason = (reason or "").strip()
    if canned is not None and answer == Decision.Answer.REJECT:
        reason = f"{canned.text} {reason}".strip()
    note = (note or "").strip()
    if answer == Decision.Answer.REJECT and not reason:
        raise RefundError("Give a reason for the rejection; the customer is sent it.")
    if len(reason) > REASON_MAX:
        raise RefundError(f"The reason is too long (at most {REASON_MAX} characters).")
    if len(note) > NOTE_MAX:
        raise RefundError(f"The internal note is too long (at most {NOTE_MAX} characters).")
    earlier = Decision.objects.filter(interrupt_id=interrupt_id).select_related("reviewer").first()
    if earlier is not None:
        raise AlreadyDecided(_already_decided_message(earlier))
    if (
        ticket.status != Ticket.Status.AWAITING_REVIEW
        or ticket.pending_interrupt_id != interrupt_id
    ):
        raise RefundError("This review is no longer pending; reload to see where the ticket is.")
    refusal = permissions.decision_refusal(reviewer, ticket)
    if refusal:
        raise PermissionDenied(refusal)
    if amount_cents is not None:
        if answer != Decision.Answer.APPROVE:
            raise RefundError("Only an approval carries a new amount.")
        refusal = permissions.edit_refusal(reviewer, ticket)
        if refusal:
            raise PermissionDenied(refusal)
        asked = ticket.amount_cents or 0
        if isinstance(amount_cents, bool) or not isinstance(amount_cents, int):
            raise RefundError("The new amount must be in dollars and cents, like 12.50.")
        if not 0 < amount_cents < asked:
            raise RefundError(
                f"The new amount must be more than $0.00 and less than the {dollars(asked)} "
                "asked; to pay it all, approve without changing it."
            )
    now = timezone.now()
    try:
        with transaction.atomic():
            # Only the claimer decides while a claim is live: one conditional UPDATE checks it
            # (and locks the row) and gives the claim back, since the review is answered. Of
            # two deciding at once the UNIQUE interrupt id below still picks one.
            held = (
                Ticket.objects.filter(pk=ticket.pk)
                .filter(_claimable(now) | Q(claimed_by=reviewer))
                .update(claimed_by=None, claim_expires_at=None)
            )
            if not held:
                # Two at once: the other one's decision may be what took the claim.
                earlier = (
                    Decision.objects.filter(interrupt_id=interrupt_id)
                    .select_related("reviewer")
                    .first()
                )
                if earlier is not None:
                    raise AlreadyDecided(_already_decided_message(earlier))
                raise ClaimTaken(_taken_message(ticket.pk))
            decision = Decision.objects.create(
                ticket=ticket,
                interrupt_id=interrupt_id,
                reviewer=reviewer,
                answer=answer,
                reason=reason,
                note=note,
                amount_cents=amount_cents,
            )
            action = AuditEvent.Action.EDIT if amount_cents is not None else answer
            given = {"answer": answer, "reason": reason, "note": note}
            if amount_cents is not None:
                given |= {"amount_cents": amount_cents, "asked_cents": ticket.amount_cents}
            if canned is not None:
                given["canned"] = canned.title
            audit.record(
                ticket,
                action,
                actor=reviewer,
                seen={"interrupt_id": interrupt_id, "review": ticket.pending_payload},
                answer=given,
                note=note,
            )
            _enqueue_advance(ticket.pk)
    except IntegrityError:  # two reviewers at once: the UNIQUE interrupt id picks one
        earlier = Decision.objects.select_related("reviewer").get(interrupt_id=interrupt_id)
        raise AlreadyDecided(_already_decided_message(earlier)) from None
    return decision


def ticket_escalate(*, ticket: Ticket, by, note: str = "") -> Ticket:
    """An agent sends a review up to managers, with a note for them. Escalated for the interrupt
    that is pending now (one conditional UPDATE), so a later review starts at its own level."""
    refusal = permissions.escalation_refusal(by, ticket)
    if refusal:
        raise PermissionDenied(refusal)
    note = (note or "").strip()
    if not note:
        raise RefundError("Say why you escalate it; the managers read your note.")
    if len(note) > NOTE_MAX:
        raise RefundError(f"The note is too long (at most {NOTE_MAX} characters).")
    with transaction.atomic():
        won = (
            Ticket.objects.filter(
                pk=ticket.pk,
                status=Ticket.Status.AWAITING_REVIEW,
                pending_interrupt_id=ticket.pending_interrupt_id,
            )
            .exclude(escalated_for=F("pending_interrupt_id"))
            .update(
                escalated_for=ticket.pending_interrupt_id,
                escalation_note=note,
                claimed_by=None,
                claim_expires_at=None,
            )
        )
        if won:
            audit.record(
                ticket,
                AuditEvent.Action.ESCALATE,
                actor=by,
                seen={
                    "interrupt_id": ticket.pending_interrupt_id,
                    "review": ticket.pending_payload,
                },
                answer={"to": "manager"},
                note=note,
            )
    if not won:
        raise RefundError("This review moved on meanwhile (decided or already escalated).")
    ticket.refresh_from_db()
    return ticket


def reviews_approve_bulk(*, picks: list[tuple[int, str]], by) -> list[dict]:
    """Approve several reviews in one action: each is its own decision, checked and audited on
    its own, and one that fails does not stop the others. Returns one result per pick."""
    results = []
    tickets = Ticket.objects.select_related("order").in_bulk([pk for pk, _ in picks])
    for pk, interrupt_id in picks:
        ticket = tickets.get(pk)
        if ticket is None or not permissions.can_view(by, ticket):
            results.append({"ticket": pk, "ok": False, "text": f"There is no ticket {pk}."})
            continue
        try:
            ticket_decide(ticket=ticket, interrupt_id=interrupt_id, answer="approve", reviewer=by)
        except (PermissionDenied, RefundError) as exc:
            results.append(
                {"ticket": pk, "ok": False, "order": ticket.order.number, "text": str(exc)}
            )
        else:
            results.append(
                {
                    "ticket": pk,
                    "ok": True,
                    "order": ticket.order.number,
                    "text": f"Approved {dollars(ticket.amount_cents)}; it is being paid out.",
                }
            )
    return results


def reviews_escalate_overdue(*, now=None) -> dict[str, list[int]]:
    """The escalation timers (run by Celery beat): an agent-level review waiting past
    REFUNDS_REVIEW_ESCALATE_MINUTES goes to managers, and managers get one reminder email per
    overdue review, listing them. Conditional UPDATEs: two beats at once escalate once."""
    now = now or timezone.now()
    limit = now - timedelta(minutes=settings.REFUNDS_REVIEW_ESCALATE_MINUTES)
    overdue = Ticket.objects.awaiting().filter(review_since__lte=limit)
    escalated = []
    for ticket in overdue.filter(required_role="agent").exclude(
        escalated_for=F("pending_interrupt_id")
    ):
        with transaction.atomic():
            won = (
                Ticket.objects.filter(
                    pk=ticket.pk, pending_interrupt_id=ticket.pending_interrupt_id
                )
                .exclude(escalated_for=F("pending_interrupt_id"))
                .update(
                    escalated_for=ticket.pending_interrupt_id,
                    escalation_note="Waited too long for an agent.",
                )
            )
            if won:
                escalated.append(ticket.pk)
                audit.record(
                    ticket,
                    AuditEvent.Action.ESCALATE,
                    seen={
                        "interrupt_id": ticket.pending_interrupt_id,
                        "since": str(ticket.review_since),
                    },
                    answer={"to": "manager", "by": "timer"},
                    note="Waited too long for an agent.",
                )
    reminded = []
    due = list(
        overdue.exclude(reminded_for=F("pending_interrupt_id"))
        .select_related("order")
        .order_by("review_since")
    )
    for ticket in due:
        if (
            Ticket.objects.filter(pk=ticket.pk, pending_interrupt_id=ticket.pending_interrupt_id)
            .exclude(reminded_for=F("pending_interrupt_id"))
            .update(reminded_for=ticket.pending_interrupt_id)
        ):
            reminded.append(ticket)
    if reminded:
        _remind_managers(reminded, now)
    return {"escalated": escalated, "reminded": [t.pk for t in reminded]}


def _remind_managers(tickets: list[Ticket], now) -> None:
    from django.contrib.auth.models import User
    from django.core.mail import send_mail

    from refunds.models import ROLE_GROUPS, Role

    to = list(
        User.objects.filter(groups__name=ROLE_GROUPS[Role.MANAGER], is_active=True)
        .exclude(email="")
        .values_list("email", flat=True)
        .distinct()
    )
    if not to:
        log.warning("%s overdue reviews, but no manager has an email address", len(tickets))
        return
    lines = []
    for t in tickets:
        waited = int((now - t.review_since).total_seconds() // 60)
        lines.append(
            f"- Order {t.order.number}: {dollars(t.amount_cents)}, waiting {waited} minutes "
            f"(ticket {t.pk})"
        )
    send_mail(
        subject=f"Refund Desk: {len(tickets)} review{'s' if len(tickets) != 1 else ''} overdue",
        message=(
            "These refund reviews have waited longer than "
            f"{settings.REFUNDS_REVIEW_ESCALATE_MINUTES:g} minutes:\n\n"
            + "\n".join(lines)
            + "\n\nThey are in the managers' queue now.\n\nRefund Desk"
        ),
        from_email=None,
        recipient_list=to,
    )


def _already_decided_message(decision: Decision) -> str:
    when = local_words(decision.decided_at)
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
            # A claim on the old review ends with it: the fork's review starts unclaimed.
            moved = Ticket.objects.filter(pk=ticket.pk, status__in=FORKABLE).update(
                status=Ticket.Status.RUNNING,
                attempts=0,
                last_error="",
                claimed_by=None,
                claim_expires_at=None,
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
