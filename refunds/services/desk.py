"""The review desk's writes: claim, decide, escalate, bulk approve."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from core.clock import local_words
from refunds import audit, enqueue, permissions, policy
from refunds.flow import answers as flow_answers
from refunds.flow.state import ReviewOrder
from refunds.models import AuditEvent, CannedReason, Decision, Ticket
from refunds.services.asking import QUESTION_MAX, asking_record, question_words
from refunds.services.credit import offer_open
from refunds.services.errors import NOTE_MAX, AlreadyDecided, ClaimTaken, RefundError
from refunds.services.returns import return_open


def _taken_message(ticket_id: int) -> str:
    row = Ticket.objects.select_related("claimed_by", "order").get(pk=ticket_id)
    holder = row.claim_holder()
    who = holder.username if holder else "a colleague"
    until = local_words(row.claim_expires_at) if holder else ""
    return f"Already taken: {who} is looking at the review of order {row.order.number}" + (
        f" (their claim lapses at {until} if they leave it)." if until else "."
    )


def review_claim(*, ticket: Ticket, by) -> Ticket:
    """ "Assign to me": one conditional UPDATE, so of two clicking at once exactly one wins."""
    permissions.deny(permissions.decision_refusal(by, ticket))
    now = timezone.now()
    until = now + timedelta(seconds=settings.REFUNDS_CLAIM_SECONDS)
    with transaction.atomic():
        won = (
            Ticket.objects.filter(pk=ticket.pk)
            .review_pending(ticket.pending_interrupt_id)
            .claimable_by(by, now)
            .update(claimed_by=by, claim_expires_at=until)
        )
        if won:
            audit.record(
                ticket,
                AuditEvent.Action.CLAIM,
                actor=by,
                seen={"interrupt_id": ticket.pending_interrupt_id},
                answer={"until": until.isoformat()},
            )
    if not won:
        if not Ticket.objects.filter(pk=ticket.pk).awaiting().exists():
            raise RefundError("This review is no longer pending; reload to see where it is.")
        raise ClaimTaken(_taken_message(ticket.pk))
    ticket.refresh_from_db()
    return ticket


def review_unclaim(*, ticket: Ticket, by) -> bool:
    """Give a claimed review back; a manager or admin may free a colleague's (gone home)."""
    qs = Ticket.objects.filter(pk=ticket.pk, claimed_by__isnull=False)
    if not permissions.oversees(by):
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


def review_orders(ticket: Ticket) -> list[ReviewOrder]:
    """The pending review's orders, as its payload lists them."""
    payload = ticket.pending_payload if isinstance(ticket.pending_payload, dict) else {}
    return list(payload.get("orders") or [])


def review_answers(
    ticket: Ticket,
    *,
    answer: str = "",
    reason: str = "",
    amount_cents: object = None,
    orders: object = None,
) -> dict[str, dict[str, Any]]:
    """The edges' shorthands expanded into the one shape ticket_decide takes (flow/answers.py)."""
    review = review_orders(ticket)
    if not review or answer == Decision.Answer.ASK:
        return {}
    try:
        return flow_answers.expanded(
            review, answer=answer, reason=reason, amount_cents=amount_cents, orders=orders
        )
    except ValueError as exc:
        raise RefundError(str(exc)) from None


def ticket_decide(
    *,
    ticket: Ticket,
    interrupt_id: str,
    reviewer,
    orders: dict[str, Any],
    note: str = "",
    sent_back: bool = False,
) -> Decision:
    """Record a reviewer's answer; the re-run review node checks `orders` again (flow/answers).
    Reasons go to the customer, `note` stays on the desk; `sent_back` (a misread message sent
    back from sorting) rejects without telling the customer anything."""
    _still_pending(ticket, interrupt_id, reviewer)
    review = review_orders(ticket)
    try:
        answers = flow_answers.checked(review, orders)
    except ValueError as exc:
        raise RefundError(str(exc)) from None
    edited = flow_answers.edited(review, answers)
    if edited:
        permissions.deny(permissions.edit_refusal(reviewer, ticket))
    approved = any(one["answer"] == Decision.Answer.APPROVE for one in answers.values())
    answer = Decision.Answer.APPROVE if approved else Decision.Answer.REJECT
    paid = flow_answers.approved_cents(answers)
    kinds = {one["answer"] for one in answers.values()}
    action: str = kinds.pop() if len(kinds) == 1 else AuditEvent.Action.ANSWER
    reason = "; ".join(dict.fromkeys(o["reason"] for o in answers.values() if o.get("reason")))
    given: dict[str, Any] = {"answer": answer, "reason": reason, "orders": answers, "note": note}
    if edited:
        action = AuditEvent.Action.EDIT
        given |= {"amount_cents": paid, "asked_cents": ticket.amount_cents}
    return _record(
        ticket,
        interrupt_id,
        reviewer,
        answer=answer,
        reason=reason,
        note=note,
        orders=dict(answers),
        sent_back=sent_back,
        action=action,
        given=given,
        amount_cents=paid if approved else ticket.amount_cents,
    )


def ticket_ask(
    *,
    ticket: Ticket,
    interrupt_id: str,
    reviewer,
    question: str = "",
    canned: CannedReason | None = None,
    note: str = "",
) -> Decision:
    """Ask the customer instead of deciding: the question is the review's answer."""
    language = (ticket.reading or {}).get("language", "")
    question = question_words(question or "", canned, language=language)
    if len(question) > QUESTION_MAX:
        raise RefundError(f"The question is too long (at most {QUESTION_MAX} characters).")
    _still_pending(ticket, interrupt_id, reviewer)
    return _record(
        ticket,
        interrupt_id,
        reviewer,
        answer=Decision.Answer.ASK,
        reason=question,
        note=note,
        action=Decision.Answer.ASK,
        given={"answer": Decision.Answer.ASK, "question": question, "note": note},
        amount_cents=ticket.amount_cents,
    )


NOT_PENDING = "This review is no longer pending; reload to see where the ticket is."


def _still_pending(ticket: Ticket, interrupt_id: str, reviewer) -> None:
    """Early checks on the caller's copy; the UPDATE in _record checks the row (the race)."""
    _refuse_if_decided(interrupt_id)
    if (
        ticket.status != Ticket.Status.AWAITING_REVIEW
        or ticket.pending_interrupt_id != interrupt_id
    ):
        raise RefundError(NOT_PENDING)
    permissions.deny(permissions.decision_refusal(reviewer, ticket))


def _record(
    ticket: Ticket,
    interrupt_id: str,
    reviewer,
    *,
    answer: str,
    reason: str,
    note: str,
    action: str,
    given: dict[str, Any],
    amount_cents: int | None,
    orders: dict[str, Any] | None = None,
    sent_back: bool = False,
) -> Decision:
    note = (note or "").strip()
    if len(note) > NOTE_MAX:
        raise RefundError(f"The internal note is too long (at most {NOTE_MAX} characters).")
    now = timezone.now()
    grace = float(settings.REFUNDS_UNDO_SECONDS)
    try:
        with transaction.atomic():
            # The race: one conditional UPDATE: the review still waits (a fork may replace it) and
            # only the claimer decides; the UNIQUE interrupt id picks one of two at once.
            pending = Ticket.objects.filter(pk=ticket.pk).review_pending(interrupt_id)
            held = pending.claimable_by(reviewer, now).update(
                claimed_by=None, claim_expires_at=None
            )
            if not held:
                if not pending.exists():
                    raise RefundError(NOT_PENDING)
                # Two at once: the other one's decision may be what took the claim.
                _refuse_if_decided(interrupt_id)
                raise ClaimTaken(_taken_message(ticket.pk))
            decision = Decision.objects.create(
                ticket=ticket,
                interrupt_id=interrupt_id,
                reviewer=reviewer,
                answer=answer,
                reason=reason,
                note=note,
                orders=orders,
                sent_back=sent_back,
                # A send-back ends a misread review with no undo: its message moved already.
                apply_after=now + timedelta(seconds=grace) if grace and not sent_back else None,
            )
            if answer == Decision.Answer.ASK:  # its reply address's token, before any email
                asking_record(ticket=ticket, decision=decision, reviewer=reviewer)
            if orders:  # an approval on return, or offering store credit: before any email
                return_open(ticket=ticket, decision=decision, answers=orders)
                offer_open(ticket=ticket, decision=decision, answers=orders)
            audit.record(
                ticket,
                action,
                actor=reviewer,
                seen={"interrupt_id": interrupt_id, "review": ticket.pending_payload},
                answer=given | {"note": note},
                note=note,
                amount_cents=amount_cents,
            )
            # Woken just after the grace (a worker woken early finds nothing due yet).
            enqueue.advance_after_on_commit(ticket.pk, grace + 0.5 if decision.apply_after else 0)
    except IntegrityError:  # two reviewers at once: the UNIQUE interrupt id picks one
        _refuse_if_decided(interrupt_id)
        raise
    return decision


def decision_undo(*, decision_id: int, by) -> Decision:
    """Undo within the grace: one conditional DELETE, so of an Undo and runner._taken one wins."""
    decision = (
        Decision.objects.select_related("ticket__order", "reviewer").filter(pk=decision_id).first()
    )
    if decision is None or decision.reviewer_id != getattr(by, "pk", None):
        raise RefundError("There is no decision of yours to undo here.")
    with transaction.atomic():
        won, _ = (
            Decision.objects.filter(
                pk=decision.pk, applied_at=None, refused_reason="", apply_after__gt=Now()
            )
            .exclude(apply_after=None)
            .delete()
        )
        if not won:
            raise RefundError(
                f"Too late to undo: the decision on order {decision.ticket.order.number} is "
                "being applied already. Open the ticket to see where it is."
            )
        audit.record(
            decision.ticket,
            AuditEvent.Action.UNDO,
            actor=by,
            seen={"interrupt_id": decision.interrupt_id, "decided_at": str(decision.decided_at)},
            answer={"answer": decision.answer}
            | ({"orders": decision.orders} if decision.orders else {}),
        )
    return decision


def ticket_escalate(*, ticket: Ticket, by, note: str = "") -> Ticket:
    """Send the pending review up to managers (one conditional UPDATE on its interrupt)."""
    permissions.deny(permissions.escalation_refusal(by, ticket))
    note = (note or "").strip()
    if not note:
        raise RefundError("Say why you escalate it; the managers read your note.")
    if len(note) > NOTE_MAX:
        raise RefundError(f"The note is too long (at most {NOTE_MAX} characters).")
    with transaction.atomic():
        won = (
            Ticket.objects.filter(pk=ticket.pk)
            .review_pending(ticket.pending_interrupt_id)
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


def reviews_approve_bulk(*, picks: list[tuple[int, str]], by) -> list[dict[str, Any]]:
    """Approve several reviews, each its own decision; one that fails does not stop the rest."""
    results: list[dict[str, Any]] = []
    tickets = Ticket.objects.select_related("order").in_bulk([pk for pk, _ in picks])
    for pk, interrupt_id in picks:
        ticket = tickets.get(pk)
        if ticket is None or not permissions.can_view(by, ticket):
            results.append({"ticket": pk, "ok": False, "text": f"There is no ticket {pk}."})
            continue
        order = numbers_words(ticket)
        try:
            decision = ticket_decide(
                ticket=ticket,
                interrupt_id=interrupt_id,
                orders=review_answers(ticket, answer="approve"),
                reviewer=by,
            )
        except (PermissionDenied, RefundError) as exc:
            results.append({"ticket": pk, "ok": False, "order": order, "text": str(exc)})
            continue
        undo = decision.undo_seconds_left()
        words = policy.paid_out_words(ticket.amount_cents, order.split(", "), undo_seconds=undo)
        results.append(
            {"ticket": pk, "ok": True, "order": order, "text": words}
            | ({"undo": decision} if decision.apply_after else {})  # within its grace
        )
    return results


def numbers_words(ticket: Ticket) -> str:
    """The ticket's order numbers as its review lists them ("1042, 1044"), without a query."""
    lines = review_orders(ticket)
    return ", ".join(str(o["number"]) for o in lines) if lines else ticket.order.number


def _refuse_if_decided(interrupt_id: str) -> None:
    """AlreadyDecided, naming who answered the interrupt and when, if anyone has."""
    decision = Decision.objects.filter(interrupt_id=interrupt_id).select_related("reviewer").first()
    if decision is None:
        return
    when = local_words(decision.decided_at)
    verbs = {
        "approve": "approved this refund",
        "reject": "rejected this refund",
        "ask": "asked the customer about this refund",
    }
    verb = verbs.get(str(decision.answer), "answered this review")
    who = decision.reviewer.username if decision.reviewer else "the customer"
    raise AlreadyDecided(f"Already decided: {who} {verb} at {when}.")
