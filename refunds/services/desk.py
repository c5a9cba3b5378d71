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
from refunds.services.errors import NOTE_MAX, AlreadyDecided, ClaimTaken, RefundError


def _claim_window() -> timedelta:
    return timedelta(seconds=settings.REFUNDS_CLAIM_SECONDS)


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
            Ticket.objects.filter(pk=ticket.pk)
            .review_pending(ticket.pending_interrupt_id)
            .claimable_by(by, now)
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
    """The edges' shorthands ("approve as proposed", "approve all", "reject all", a manager's
    lower amount, answers per order) expanded into the one shape ticket_decide takes, against
    the ticket's pending review (refunds/flow/answers.py). Nothing pending: nothing to expand
    (ticket_decide says where the ticket is)."""
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
    """Record a reviewer's answer to one pending interrupt, then let a worker apply it.

    `orders`: the answer in its one shape, per open order number ({"answer": "approve",
    "parts", "reason"?} or {"answer": "reject", "reason"}; review_answers expands the
    shorthands), checked here by the check the review node runs again (flow/answers.py). Parts
    other than proposed are an edit, which only a manager makes. Reasons go to the customer;
    `note` stays on the desk.

    `sent_back` (intake.sorting.message_send_back only): a rejection because the message was
    misread; the thread tells the customer nothing, the reason stays on the desk."""
    _still_pending(ticket, interrupt_id, reviewer)
    review = review_orders(ticket)
    try:
        answers = flow_answers.checked(review, orders)
    except ValueError as exc:
        raise RefundError(str(exc)) from None
    edited = flow_answers.edited(review, answers)
    if edited:
        refusal = permissions.edit_refusal(reviewer, ticket)
        if refusal:
            raise PermissionDenied(refusal)
    approved = any(one["answer"] == Decision.Answer.APPROVE for one in answers.values())
    answer = Decision.Answer.APPROVE if approved else Decision.Answer.REJECT
    reasons = [one.get("reason", "") for one in answers.values()]
    paid = flow_answers.approved_cents(answers)
    # Each action as itself: a change of what is refunded, the plain answer, or a mix.
    kinds = {one["answer"] for one in answers.values()}
    action = (
        AuditEvent.Action.EDIT
        if edited
        else kinds.pop()
        if len(kinds) == 1
        else AuditEvent.Action.ANSWER
    )
    reason = "; ".join(dict.fromkeys(r for r in reasons if r))
    given: dict[str, Any] = {"answer": answer, "reason": reason, "orders": answers, "note": note}
    if edited:
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
    """Ask the customer instead of deciding: the question (a canned one, words of one's own, or
    both) is recorded as the review's answer with its reply token; the thread sends it and
    waits for the reply."""
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
        orders=None,
        action=Decision.Answer.ASK,
        given={"answer": Decision.Answer.ASK, "question": question, "note": note},
        amount_cents=ticket.amount_cents,
    )


def _still_pending(ticket: Ticket, interrupt_id: str, reviewer) -> None:
    """The early checks on the caller's copy: answered already, moved on, not theirs to decide
    (the UPDATE in _record checks the row again, where the race is)."""
    _refuse_if_decided(interrupt_id)
    if (
        ticket.status != Ticket.Status.AWAITING_REVIEW
        or ticket.pending_interrupt_id != interrupt_id
    ):
        raise RefundError("This review is no longer pending; reload to see where the ticket is.")
    refusal = permissions.decision_refusal(reviewer, ticket)
    if refusal:
        raise PermissionDenied(refusal)


def _record(
    ticket: Ticket,
    interrupt_id: str,
    reviewer,
    *,
    answer: str,
    reason: str,
    note: str,
    orders: dict[str, Any] | None,
    action: str,
    given: dict[str, Any],
    amount_cents: int | None,
    sent_back: bool = False,
) -> Decision:
    note = (note or "").strip()
    if len(note) > NOTE_MAX:
        raise RefundError(f"The internal note is too long (at most {NOTE_MAX} characters).")
    now = timezone.now()
    grace = float(settings.REFUNDS_UNDO_SECONDS)
    try:
        with transaction.atomic():
            # One conditional UPDATE checks, on the row and not on the caller's copy, that this
            # review still waits (a fork applied since the page read it put another interrupt
            # in its place) and that only the claimer decides while a claim is live; it locks
            # the row and gives the claim back, since the review is answered. Of two deciding
            # at once the UNIQUE interrupt id below still picks one.
            pending = Ticket.objects.filter(pk=ticket.pk).review_pending(interrupt_id)
            held = pending.claimable_by(reviewer, now).update(
                claimed_by=None, claim_expires_at=None
            )
            if not held:
                if not pending.exists():
                    raise RefundError(
                        "This review is no longer pending; reload to see where the ticket is."
                    )
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
    """Withdraw a decision within its undo grace: the review is back in the queue as it was
    (claims given back; anyone may answer it again). One conditional DELETE, only while the
    grace runs and no worker took it (the runner's `_taken` ends the grace as it takes it): of
    an Undo and the apply at the same moment, exactly one wins. Only who decided undoes it."""
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
    """Approve several reviews in one action: each is its own decision, checked and audited on
    its own, and one that fails does not stop the others. Returns one result per pick."""
    results: list[dict[str, Any]] = []
    tickets = Ticket.objects.select_related("order").in_bulk([pk for pk, _ in picks])
    for pk, interrupt_id in picks:
        ticket = tickets.get(pk)
        if ticket is None or not permissions.can_view(by, ticket):
            results.append({"ticket": pk, "ok": False, "text": f"There is no ticket {pk}."})
            continue
        try:
            decision = ticket_decide(
                ticket=ticket,
                interrupt_id=interrupt_id,
                orders=review_answers(ticket, answer="approve"),
                reviewer=by,
            )
        except (PermissionDenied, RefundError) as exc:
            results.append(
                {"ticket": pk, "ok": False, "order": numbers_words(ticket), "text": str(exc)}
            )
        else:
            results.append(
                {
                    "ticket": pk,
                    "ok": True,
                    "order": numbers_words(ticket),
                    "text": policy.paid_out_words(
                        ticket.amount_cents,
                        numbers_words(ticket).split(", "),
                        undo_seconds=decision.undo_seconds_left(),
                    ),
                }
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
