"""Refunds on return: the warehouse's word on the goods is the wait's Decision, recorded once
under a compare-and-set and applied by a worker under the lease (as a customer's reply is)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import CharField, Exists, F, OuterRef, Q, Value
from django.db.models.functions import Cast, Concat
from django.urls import reverse
from django.utils import timezone

from core.clock import local_words
from refunds import audit, enqueue, outbox
from refunds.flow.nodes.returns import came_back, reference_read, return_key, return_reference
from refunds.flow.state import OrderAnswer, Returning
from refunds.models import AuditEvent, Decision, Email, OrderLine, ReturnRequest, Ticket
from refunds.services.errors import RefundError
from refunds.services.timers import customer_reminder, reminders_deliver

log = logging.getLogger(__name__)

REASON_MAX = 1000  # of a flag's reason
Status = Literal["received", "flagged"]


def return_open(*, ticket: Ticket, decision: Decision, answers: dict[str, OrderAnswer]) -> None:
    """In the transaction that records an approval: its return, when it waits for goods."""
    back = {
        number: [p for p in one["parts"] if p.get("line")]
        for number, one in answers.items()
        if one["answer"] == Decision.Answer.APPROVE and one.get("on_return")
    }
    if back:
        ReturnRequest.objects.create(
            ticket=ticket,
            decision=decision,
            reference=return_reference(decision.pk),
            orders=back,
        )


@dataclass(frozen=True)
class Back:
    """One line that came back, as a warehouse says it: by the line's id or its SKU; `order`
    may be left out when the return covers one order."""

    quantity: int
    line: int | None = None
    sku: str = ""
    order: str = ""


@dataclass(frozen=True)
class Arrival:
    ticket_id: int
    reference: str
    # "recorded": the thread resumes; "kept": it is applied once the thread waits;
    # "already": the same word came before, nothing changed.
    outcome: Literal["recorded", "kept", "already"]


def return_find(reference: str) -> ReturnRequest:
    """The return a scanned or typed reference names; RefundError says why none."""
    said = (reference or "").strip()[:40]
    decision_id = reference_read(said)
    if decision_id is None:
        raise RefundError(
            f"“{said}” is not a return reference (they read like RT-1234-56): check it."
        )
    found = (
        ReturnRequest.objects.filter(decision_id=decision_id)
        .select_related("ticket__order", "decision")
        .first()
    )
    if found is None:
        raise RefundError(f"No return has the reference {return_reference(decision_id)}.")
    return found


def return_arrived(
    *,
    reference: str,
    status: Status,
    lines: Sequence[Back] | None = None,
    reason: str = "",
    by=None,
    source: str,
) -> Arrival:
    """What the warehouse says of a return's goods; RefundError for a wrong reference, lines
    never asked back, too many units, or a different word on a return already settled. The
    same word twice is harmless (`already`)."""
    found = return_find(reference)
    said = _said(found, status, lines, reason.strip())
    said["by"] = str(by or source)[:150]
    seen = {"return": found.reference, "source": source}
    if found.arrived is not None:
        return _again(found, said)
    if _waiting(found) == _ON_ITS_WAY:
        if ReturnRequest.objects.filter(pk=found.pk, arrived_at=None, early__isnull=True).update(
            early=said
        ):
            _audit(found, said, seen | {"kept": True}, by, why="")
            return Arrival(found.ticket_id, found.reference, "kept")
        raise RefundError(f"Return {found.reference}: a word on its goods is kept already.")
    try:
        with transaction.atomic():
            _record(found, said, seen, by)
    except _NotRecorded as exc:
        found.refresh_from_db()
        if found.arrived is not None:
            return _again(found, said)
        _audit(found, said, seen, by, why=str(exc))
        raise RefundError(f"Return {found.reference}: {exc}; nothing changed.") from None
    return Arrival(found.ticket_id, found.reference, "recorded")


def _said(
    found: ReturnRequest, status: str, lines: Sequence[Back] | None, reason: str
) -> dict[str, Any]:
    """The word in the one shape the thread takes, checked as the thread will check it."""
    if status == Decision.Answer.FLAGGED:
        if not reason:
            raise RefundError("Say why the return is flagged: a manager reads it.")
        if len(reason) > REASON_MAX:
            raise RefundError(f"The reason is too long (at most {REASON_MAX} characters).")
        if lines:
            raise RefundError("A flagged return carries a reason, not lines.")
        return {"answer": status, "orders": None, "reason": reason}
    if status != Decision.Answer.RECEIVED:
        raise RefundError(f"A return is received or flagged, not “{str(status)[:40]}”.")
    units = _units(found, lines) if lines else None
    everything = {
        n: {str(p["line"]): p["quantity"] for p in parts} for n, parts in found.orders.items()
    }
    if units == everything:
        units = None  # one shape for "all of it", whether scanned or counted
    returning: Returning = {
        "reference": found.reference,
        "decision_id": found.decision_id,
        "asked_by": "",
        "orders": found.orders,
    }
    try:
        back = came_back(returning, units)
    except ValueError as exc:
        raise RefundError(str(exc)) from None
    if not any(back.values()):
        raise RefundError(
            f"Return {found.reference}: nothing came back in that; flag it, or wait for the goods."
        )
    return {"answer": status, "orders": units, "reason": reason[:REASON_MAX]}


def _units(found: ReturnRequest, lines: Sequence[Back]) -> dict[str, dict[str, int]]:
    """Lines by id or SKU into units per order and line, every line asked back said (0 if none)."""
    units = {number: {str(p["line"]): 0 for p in parts} for number, parts in found.orders.items()}
    for one in lines:
        number = one.order or (next(iter(units)) if len(units) == 1 else "")
        if number not in units:
            raise RefundError(
                f"Return {found.reference} covers order {', '.join(units)}: "
                + ("say which order each line is of." if not one.order else f"not {one.order}.")
            )
        line = one.line
        if line is None:
            line = (
                OrderLine.objects.filter(order__number=number, sku=one.sku)
                .values_list("pk", flat=True)
                .first()
            )
            if line is None:
                raise RefundError(f"Order {number} has no line with the SKU “{one.sku[:60]}”.")
        if str(line) not in units[number]:
            raise RefundError(
                f"Order {number}: line {line} was not asked back in return {found.reference}."
            )
        units[number][str(line)] += one.quantity
    return units


def _again(found: ReturnRequest, said: dict[str, Any]) -> Arrival:
    """A second delivery of a return's word: harmless when it says the same, else refused."""
    before = found.arrived or {}
    if all(before.get(k) == said.get(k) for k in ("answer", "orders", "reason")):
        return Arrival(found.ticket_id, found.reference, "already")
    when = f" ({local_words(found.arrived_at)})" if found.arrived_at else ""
    raise RefundError(
        f"Return {found.reference} was recorded as {before.get('answer')} already{when}; "
        "nothing changed."
    )


class _NotRecorded(Exception):
    pass


def _record(found: ReturnRequest, said: dict[str, Any], seen: dict, by) -> Decision:
    # The race: late guards on the rows. One conditional UPDATE takes the return, so a second
    # word finds it taken; the UNIQUE interrupt id stands behind it.
    now = timezone.now()
    row = (
        Ticket.objects.filter(pk=found.ticket_id, status=Ticket.Status.AWAITING_RETURN)
        .values("pending_interrupt_id", "pending_payload")
        .first()
    )
    payload = row["pending_payload"] if row and isinstance(row["pending_payload"], dict) else {}
    if row is None or payload.get("return_id") != found.decision_id:
        raise _NotRecorded("the ticket does not wait for these goods")
    if not ReturnRequest.objects.filter(pk=found.pk, arrived_at=None).update(
        arrived_at=now, arrived=said, early=None
    ):
        raise _NotRecorded("its goods were recorded already")
    try:
        with transaction.atomic():
            decision = Decision.objects.create(
                ticket_id=found.ticket_id,
                interrupt_id=row["pending_interrupt_id"],
                reviewer=by if getattr(by, "pk", None) else None,
                answer=said["answer"],
                reason=said["reason"],
                orders=said["orders"],
            )
    except IntegrityError:
        raise _NotRecorded("the thread's wait has its answer already") from None
    ReturnRequest.objects.filter(pk=found.pk).update(outcome=decision)
    _audit(found, said, seen | {"interrupt_id": row["pending_interrupt_id"]}, by, why="")
    enqueue.advance_on_commit(found.ticket_id)
    return decision


def _audit(found: ReturnRequest, said: dict[str, Any], seen: dict, by, *, why: str) -> None:
    answer = {k: said[k] for k in ("answer", "orders")} | {"resumed": not why}
    if why:
        answer["why"] = why
    audit.record(
        found.ticket_id,
        AuditEvent.Action.RETURN,
        actor=by if getattr(by, "pk", None) else None,
        seen=seen,
        answer=answer,
        note=said.get("reason", "")[:300],
    )


def _waiting(found: ReturnRequest) -> str:
    row = Ticket.objects.filter(pk=found.ticket_id).values("status", "pending_payload").first()
    if row is None:
        return "its ticket is gone"
    if row["status"] in (Ticket.Status.RUNNING, Ticket.Status.NEW):
        return _ON_ITS_WAY
    return ""


# The approval is being applied, the email not yet sent: the word waits for the thread's wait.
_ON_ITS_WAY = "the ticket does not wait for the goods yet (it is running)"


def returns_kept_apply() -> list[int]:
    """The sweep's: apply each kept word on goods now waited for, once (the CAS on arrived_at)."""
    kept = ReturnRequest.objects.filter(
        early__isnull=False, arrived_at=None, ticket__status=Ticket.Status.AWAITING_RETURN
    )
    applied = []
    for found in kept:
        assert isinstance(found.early, dict)  # the filter's
        try:
            with transaction.atomic():
                _record(found, found.early, {"return": found.reference, "kept": True}, None)
        except _NotRecorded as exc:
            log.info("return %s: kept word not applied: %s", found.reference, exc)
        else:
            applied.append(found.ticket_id)
    return applied


def returns_wait_timers(*, now=None) -> dict[str, list[int]]:
    """The goods' timers: a reminder to the customer, then "nothing came back". Conditional
    UPDATEs: two beats at once remind once; of an arrival and the give-up at once one wins."""
    now = now or timezone.now()
    waiting = ReturnRequest.objects.filter(
        arrived_at=None, ticket__status=Ticket.Status.AWAITING_RETURN
    ).select_related("ticket__order")
    give_up = now - timedelta(days=settings.REFUNDS_RETURN_GIVE_UP_DAYS)
    remind = now - timedelta(days=settings.REFUNDS_RETURN_REMIND_DAYS)
    ended, reminded = [], []
    for found in waiting.filter(asked_at__lte=give_up):
        said = {"answer": Decision.Answer.NO_RETURN, "orders": None, "reason": "", "by": "timer"}
        try:
            with transaction.atomic():
                _record(found, said, {"return": found.reference, "by": "timer"}, None)
        except _NotRecorded as exc:
            log.info("return %s: no give-up: %s", found.reference, exc)
        else:
            ended.append(found.ticket_id)
    for found in waiting.filter(asked_at__lte=remind, asked_at__gt=give_up, reminded_at=None):
        with transaction.atomic():
            if ReturnRequest.objects.filter(pk=found.pk, reminded_at=None).update(reminded_at=now):
                _reminder_written(found)
                reminded.append(found.ticket_id)
    reminders_deliver(_reminders())
    return {"ended": ended, "reminded": reminded}


def _reminder_written(found: ReturnRequest) -> None:
    ticket = found.ticket
    titles = dict(
        OrderLine.objects.filter(order__number__in=found.orders).values_list("pk", "title")
    )
    items = [
        {"number": n, "quantity": p["quantity"], "title": titles.get(p["line"], "")}
        for n, parts in found.orders.items()
        for p in parts
    ]
    facts = {
        "reference": found.reference,
        "address": settings.REFUNDS_RETURN_ADDRESS,
        "items": items,
        "days": round(settings.REFUNDS_RETURN_GIVE_UP_DAYS - settings.REFUNDS_RETURN_REMIND_DAYS),
    }
    key = return_key(ticket.thread_id, found.decision_id) + REMINDER_SUFFIX
    customer_reminder(ticket, key, "return", facts)
    audit.record(
        ticket,
        AuditEvent.Action.RETURN,
        seen={"return": found.reference},
        answer={"reminder": True},
    )


# Customers' reminders of a return: no run sends them; the timer or a Resend claims each.
REMINDER_SUFFIX = ":reminder"


def _reminders() -> Q:
    return Q(key__contains=":return:", key__endswith=REMINDER_SUFFIX)


def _reminders_still_true() -> Q:
    """Reminders whose goods are still waited for: after, "we have not received" is untrue."""
    waiting = (
        ReturnRequest.objects.filter(arrived_at=None, ticket__status=Ticket.Status.AWAITING_RETURN)
        .annotate(
            reminder_key=Concat(
                F("ticket__thread_id"),
                Value(":return:"),
                Cast("decision_id", CharField()),
                Value(REMINDER_SUFFIX),
                output_field=CharField(),
            )
        )
        .filter(reminder_key=OuterRef("key"))
    )
    return _reminders() & Q(Exists(waiting))


def _about(found: list[Email]) -> dict[int, tuple[str, str]]:
    return {
        e.pk: (f"Return reminder: {e.subject}", reverse("reviews:ticket", args=[e.ticket_id]))
        for e in found
        if e.ticket_id and ":return:" in e.key and e.key.endswith(REMINDER_SUFFIX)
    }


RETURN_REMINDERS = outbox.OtherRun(
    owns=_reminders,
    settled=_reminders_still_true,
    busy=(
        "That reminder says the goods have not come back yet, and it is not true any more: "
        "they came, or the wait for them ended."
    ),
    about=_about,
)
