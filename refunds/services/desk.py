"""The review desk's writes: claim, decide, escalate, bulk approve."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from core.clock import local_words
from refunds import audit, enqueue, permissions, policy
from refunds.flow.words import dollars
from refunds.models import (
    AuditEvent,
    CannedReason,
    Decision,
    Ticket,
)
from refunds.services.asking import QUESTION_MAX, asking_record, question_words
from refunds.services.errors import NOTE_MAX, REASON_MAX, AlreadyDecided, ClaimTaken, RefundError

ANSWERS = ("approve", "reject", "ask")


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
    orders: dict[str, Any] | None = None,
    sent_back: bool = False,
) -> Decision:
    """Record a reviewer's answer to one pending interrupt, then let a worker apply it.

    `reason` (with a canned reason in front of it) goes to the customer; `note` stays on the
    desk. `amount_cents` makes an approval an "edit": a manager pays less than asked.

    A ticket of several orders (its pending payload lists `orders`) takes `orders`, the answer
    per order number ({"answer": "approve", "amount_cents"?} or {"answer": "reject",
    "reason"?}); an open order left out gets `answer`, a rejection without its own reason gets
    `reason`. Every open order's answer is recorded in Decision.orders; Decision.answer says
    whether any was approved. A lower amount per order follows the one-order edit's rule (who,
    and more than $0.00).

    `sent_back` (intake.sorting.message_send_back only): a rejection because the message was
    misread; the thread tells the customer nothing, `reason` stays on the desk."""
    if answer not in ANSWERS:
        raise RefundError("Choose approve or reject (or ask the customer).")
    reason = (reason or "").strip()
    asking = answer == Decision.Answer.ASK
    if asking:
        reason = question_words(reason, canned, amount_cents=amount_cents, orders=orders)
        canned = None
    lines = None if asking else _several_lines(ticket)
    if lines is None and _names_parts(orders):  # one order's parts: answered as its own line
        lines = _review_lines(ticket)
    if orders is not None and lines is None:
        raise RefundError(
            f"This ticket covers one order ({ticket.order.number}); answer it without per-order "
            "answers."
        )
    if lines is not None and amount_cents is not None:
        raise RefundError(
            "This ticket covers several orders: lower an order's own amount, not the total."
        )
    rejecting = answer == Decision.Answer.REJECT or any(
        isinstance(one, dict) and one.get("answer") == Decision.Answer.REJECT
        for one in (orders.values() if isinstance(orders, dict) else ())
    )
    if canned is not None and rejecting:
        reason = f"{canned.text} {reason}".strip()
    note = (note or "").strip()
    if asking and len(reason) > QUESTION_MAX:
        raise RefundError(f"The question is too long (at most {QUESTION_MAX} characters).")
    if answer == Decision.Answer.REJECT and not reason and lines is None:
        raise RefundError("Give a reason for the rejection; the customer is sent it.")
    if len(reason) > REASON_MAX and not asking:
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
    answers: dict[str, dict[str, Any]] | None = None
    lowered = False
    if lines is not None:
        answers, lowered = _order_answers(ticket, lines, orders or {}, answer, reason, reviewer)
        approved = any(a["answer"] == Decision.Answer.APPROVE for a in answers.values())
        answer = Decision.Answer.APPROVE if approved else Decision.Answer.REJECT
    proposed = (ticket.pending_payload or {}).get("amount_cents")
    if answer == Decision.Answer.APPROVE and lines is None and proposed == 0:
        # The policy proposed nothing (a damaged item the message does not name): the review
        # node would refuse the approval of nothing, after the decision was recorded.
        raise RefundError(
            f"Nothing is proposed to refund for order {ticket.order.number}: choose what to "
            "refund on the ticket page, or reject it, or ask the customer."
        )
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
    grace = float(settings.REFUNDS_UNDO_SECONDS)
    try:
        with transaction.atomic():
            # One conditional UPDATE checks, on the row and not on the caller's copy, that this
            # review still waits (a fork applied since the page read it put another interrupt
            # in its place) and that only the claimer decides while a claim is live; it locks
            # the row and gives the claim back, since the review is answered. Of two deciding
            # at once the UNIQUE interrupt id below still picks one.
            pending = Ticket.objects.filter(
                pk=ticket.pk,
                status=Ticket.Status.AWAITING_REVIEW,
                pending_interrupt_id=interrupt_id,
            )
            held = pending.filter(_claimable(now) | Q(claimed_by=reviewer)).update(
                claimed_by=None, claim_expires_at=None
            )
            if not held:
                if not pending.exists():
                    raise RefundError(
                        "This review is no longer pending; reload to see where the ticket is."
                    )
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
                orders=answers,
                sent_back=sent_back,
                # A send-back ends a misread review with no undo: its message moved already.
                apply_after=now + timedelta(seconds=grace) if grace and not sent_back else None,
            )
            if asking:  # its reply address's token, kept before any email can carry it
                asking_record(ticket=ticket, decision=decision, reviewer=reviewer)
            # Each action as itself: answered order by order (whatever the mix), a lower amount,
            # or the plain answer ("Approve all" of several too); with the amount it pays.
            action: str = answer
            if answers is not None and orders is not None:
                action = AuditEvent.Action.ANSWER
            elif amount_cents is not None:
                action = AuditEvent.Action.EDIT
            if answers is not None:
                paid = sum(
                    one["amount_cents"]
                    for one in answers.values()
                    if one["answer"] == Decision.Answer.APPROVE
                )
            else:
                paid = amount_cents if amount_cents is not None else ticket.amount_cents
            given: dict[str, Any] = {"answer": answer, "reason": reason, "note": note}
            if asking:
                given = {"answer": answer, "question": reason, "note": note}
            if amount_cents is not None:
                given |= {"amount_cents": amount_cents, "asked_cents": ticket.amount_cents}
            if answers is not None:
                given["orders"] = answers
            if canned is not None:
                given["canned"] = canned.title
            audit.record(
                ticket,
                action,
                actor=reviewer,
                seen={"interrupt_id": interrupt_id, "review": ticket.pending_payload},
                answer=given,
                note=note,
                amount_cents=paid if answer == Decision.Answer.APPROVE else ticket.amount_cents,
            )
            # Woken just after the grace (a worker woken early finds nothing due yet).
            enqueue.advance_after_on_commit(ticket.pk, grace + 0.5 if decision.apply_after else 0)
    except IntegrityError:  # two reviewers at once: the UNIQUE interrupt id picks one
        earlier = Decision.objects.select_related("reviewer").get(interrupt_id=interrupt_id)
        raise AlreadyDecided(_already_decided_message(earlier)) from None
    return decision


def _several_lines(ticket: Ticket) -> dict[str, dict[str, Any]] | None:
    """The pending review's line per order, by number, for a ticket of several orders; None for
    one order (answered as a whole, its amount lowered by `amount_cents`, or by its parts)."""
    lines = _review_lines(ticket)
    return lines if lines and len(lines) >= 2 else None


def _review_lines(ticket: Ticket) -> dict[str, dict[str, Any]] | None:
    payload = ticket.pending_payload or {}
    lines = payload.get("orders") if isinstance(payload, dict) else None
    return {str(line["number"]): line for line in lines} if lines else None


def _names_parts(orders: Any) -> bool:
    return isinstance(orders, dict) and any(
        isinstance(one, dict) and "parts" in one for one in orders.values()
    )


def _order_answers(
    ticket: Ticket,
    lines: dict[str, dict[str, Any]],
    given: Any,
    answer: str,
    reason: str,
    reviewer,
) -> tuple[dict[str, dict[str, Any]], bool]:
    """Each open order's answer, checked against the pending review: `given`'s own, else
    `answer` for all. Returns them and whether any amount was lowered. A RefundError (or
    PermissionDenied for a lower amount the reviewer may not set) says what is wrong."""
    if not isinstance(given, dict):
        raise RefundError("The answers per order must map each order number to its answer.")
    given = {str(number): one for number, one in given.items()}
    for number in given:
        line = lines.get(str(number))
        if line is None:
            raise RefundError(
                f"This ticket covers no order {str(number)[:40]}; its orders are "
                f"{', '.join(lines)}."
            )
        if line.get("status") != "open":
            why = (
                "declined by policy"
                if line.get("status") == "declined"
                else f"refunded already (receipt {line.get('receipt') or 'on file'})"
            )
            raise RefundError(f"Order {number} is {why}; there is nothing to decide for it.")
    asked = {n: int(line.get("amount_cents") or 0) for n, line in lines.items()}
    open_ = {n: cents for n, cents in asked.items() if lines[n].get("status") == "open"}
    try:
        bought = {n: line["order"] for n, line in lines.items() if line.get("order")}
        answers = policy.order_answers_checked(
            open_, given, answer=answer, reason=reason, bought=bought
        )
    except ValueError as exc:
        raise RefundError(str(exc)) from None
    for number, one in answers.items():
        said = one.get("reason") or ""
        if one["answer"] == Decision.Answer.REJECT and not said:
            raise RefundError(
                f"Give a reason for rejecting order {number}; the customer is sent it."
            )
        if len(said) > REASON_MAX:
            raise RefundError(
                f"Order {number}: the reason is too long (at most {REASON_MAX} characters)."
            )
    # Parts other than the proposal are an edit too, whatever their sum.
    lowered = any(
        one.get("amount_cents", open_[n]) < open_[n] or "parts" in given.get(n, {})
        for n, one in answers.items()
    )
    if lowered:
        refusal = permissions.edit_refusal(reviewer, ticket)
        if refusal:
            raise PermissionDenied(refusal)
    return answers, lowered


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
            answer={"answer": decision.answer, "amount_cents": decision.amount_cents}
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
                ticket=ticket, interrupt_id=interrupt_id, answer="approve", reviewer=by
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
    lines = _several_lines(ticket)
    return ", ".join(lines) if lines else ticket.order.number


def _already_decided_message(decision: Decision) -> str:
    when = local_words(decision.decided_at)
    verbs = {
        "approve": "approved this refund",
        "reject": "rejected this refund",
        "ask": "asked the customer about this refund",
    }
    verb = verbs.get(str(decision.answer), "answered this review")
    who = decision.reviewer.username if decision.reviewer else "the customer"
    return f"Already decided: {who} {verb} at {when}."
