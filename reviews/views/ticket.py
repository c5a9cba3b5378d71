"""One ticket: open it, read it (with its polled status)."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import (
    HttpResponseClientRedirect,
    HttpResponseStopPolling,
    trigger_client_event,
)

from intake import selectors as intake_selectors
from intake import services as intake
from intake import sorting
from intake.models import Message
from refunds import permissions, policy, selectors, services
from refunds.flow.words import numbers_words
from refunds.models import CannedReason, Ticket
from reviews.forms import order_numbers_typed, parts_answers
from reviews.templatetags.desk import proposal_sums
from reviews.views.common import (
    ORDER_LINKS,
    TICKET_STATUS,
    HtmxHttpRequest,
    with_pending_decisions,
)


@require_http_methods(["GET", "POST"])
@login_required
def ticket_new(request: HtmxHttpRequest) -> HttpResponse:
    permissions.deny(permissions.open_refusal(request.user))
    values = {"order_number": "", "note": "", "sender": "", "message": ""}
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in values}
        if values["message"].strip() or values["sender"].strip():
            return _paste(request, values)
        numbers = order_numbers_typed(values["order_number"])
        try:
            ticket = services.ticket_open(
                opened_by=request.user, order_numbers=numbers, note=values["note"]
            )
        except services.TicketAlreadyOpen as exc:
            # Which order has which ticket, and the other orders typed: none opened either.
            said = str(exc)
            others = [n for n in numbers if n not in exc.ticket.order_numbers()]
            if others:
                said += (
                    f" No ticket was opened for {', '.join(others)}: type "
                    f"{'it' if len(others) == 1 else 'them'} again without {exc.number} to "
                    "open one."
                )
            messages.info(request, said)
            url = reverse("reviews:ticket", args=[exc.ticket.pk])
            return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
        except services.RefundError as exc:
            context: dict[str, Any] = {"error": str(exc), "values": values}
            template = "reviews/ticket_new.html#form" if request.htmx else "reviews/ticket_new.html"
            return render(request, template, context, status=400)
        text = f"Opened ticket {ticket.pk} for {numbers_words(ticket.order_numbers())}."
        if request.htmx:
            context = {"opened": ticket, "values": {}}
            response = render(request, "reviews/ticket_new.html#form", context)
            return trigger_client_event(response, "ticketsChanged")
        messages.success(request, text)
        return redirect("reviews:ticket", ticket_id=ticket.pk)
    return render(request, "reviews/ticket_new.html", {"values": values})


def _timeline(ticket: Ticket, ticket_messages: list) -> list:
    """The audit events and the customer's messages of the ticket, in the order they came."""
    entries: list[Any] = list(ticket.audit_events.select_related("actor"))
    entries += [{"action": "message", "at": m.received_at, "m": m} for m in ticket_messages]
    return sorted(entries, key=lambda e: e["at"] if isinstance(e, dict) else e.at)


def _paste(request: HtmxHttpRequest, values: dict[str, str]) -> HttpResponse:
    """A customer's message pasted into the form: in through the intake, onto its own page."""
    error = ""
    if values["order_number"].strip():
        error = (
            "Type an order number or paste the customer's message, not both: the intake finds "
            "the order in the message."
        )
    else:
        try:
            message, _ = intake.message_receive(
                channel=Message.Channel.DESK,
                key=f"{request.user.pk}:{uuid.uuid4().hex}",
                sender=values["sender"],
                subject="",
                body=values["message"],
                received_at=timezone.now(),
                raw=values["message"],
                brought_by=request.user,
            )
        except intake.MessageRefused as exc:
            error = str(exc)
        else:
            url = reverse("reviews:message", args=[message.pk])
            return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    template = "reviews/ticket_new.html#form" if request.htmx else "reviews/ticket_new.html"
    return render(request, template, {"error": error, "values": values}, status=400)


def _visible_message(request: HtmxHttpRequest, message_id: int) -> Message:
    permissions.deny(permissions.open_refusal(request.user))
    visible = intake_selectors.messages_visible(request.user)
    return get_object_or_404(visible.select_related("ticket__order", "brought_by"), pk=message_id)


def _placements(message: Message):
    # A reply names no orders of its own: its ticket's are shown (templatetags placed_words).
    return (
        message.placements.select_related("ticket__order")
        .prefetch_related("ticket__links__order")
        .order_by("id")
    )


@require_GET
@login_required
@vary_on_headers("HX-Request")
def message_detail(request: HtmxHttpRequest, message_id: int) -> HttpResponse:
    """Where a customer's message went; polled until the intake has placed it."""
    message = _visible_message(request, message_id)
    aside = sorting.set_aside_event(message)
    context = {
        "message": message,
        "placed": _placements(message),
        "last": message.events.select_related("actor").order_by("-at", "-id").first(),
        "aside": aside,
        "reply": sorting.set_aside_email(aside),
        "may_sort": permissions.is_desk_user(request.user),
    }
    if request.htmx:
        response = render(request, "reviews/message.html#status", context)
        if message.status != Message.Status.RECEIVED:
            response.status_code = HttpResponseStopPolling.status_code
        return response
    return render(request, "reviews/message.html", context)


@require_GET
@login_required
def message_history(request: HtmxHttpRequest, message_id: int) -> HttpResponse:
    """A message's whole path, oldest first: the intake's and each person's (MessageEvent)."""
    message = _visible_message(request, message_id)
    context = {
        "message": message,
        "events": message.events.select_related("actor").order_by("at", "id"),
        "placed": _placements(message),
    }
    return render(request, "reviews/message_history.html", context)


def _ticket_context(request: HtmxHttpRequest, ticket: Ticket) -> dict:
    refusal = permissions.decision_refusal(request.user, ticket)
    ticket_messages = list(ticket.messages.all())
    orders = [link.order for link in ticket.links.all()]
    lines = selectors.orders_bought(order.pk for order in orders)
    progress = selectors.refund_progress(ticket)
    goods_return = selectors.return_waited(ticket)
    return {
        # What each order holds (those sent with their lines): bought, refunded, left.
        "bought": [(order, lines[order.pk]) for order in orders if order.pk in lines],
        "several": len(orders) > 1,
        "ticket": with_pending_decisions([ticket])[0],
        "decisions": ticket.decisions.select_related("reviewer"),
        "charges": ticket.charges.select_related("order"),
        # Refunds of its orders' payments the desk did not make: they count against what is left.
        "outside": selectors.outside_refunds_words(order.pk for order in orders),
        # Disputes of its orders' payments: while one is open, a refund may pay twice.
        "disputes": selectors.disputes_words(order.pk for order in orders),
        "refund_progress": progress,
        "refunds": {ticket.pk: progress} if progress else {},
        "emails": ticket.emails.all(),
        "resendable": selectors.resendable_email_ids(ticket),
        "may_decide": not refusal,
        "refusal": refusal,
        "may_edit": not permissions.edit_refusal(request.user, ticket),
        "may_escalate": not permissions.escalation_refusal(request.user, ticket),
        "earlier": selectors.earlier_tickets(ticket),
        "is_admin": permissions.is_admin(request.user),
        "timeline": _timeline(ticket, ticket_messages),
        "ticket_messages": ticket_messages,
        # Those a reviewer may send back as misread: not the customer's replies to a question.
        "read_messages": [m for m in ticket_messages if m.answers_question_id is None],
        # The customer's message it was opened from, if any: "Opened by … from a pasted message".
        "opened_from": next(
            (m for m in ticket_messages if m.status == Message.Status.OPENED), None
        ),
        "canned": list(CannedReason.objects.rejecting()),
        "questions": list(CannedReason.objects.asking()),
        # A ticket waiting for goods: the reference and the lines the customer sends back.
        "goods_return": goods_return,
        "return_lines": selectors.return_lines(goods_return) if goods_return else [],
    }


def ticket_status_fragment(
    request: HtmxHttpRequest, ticket: Ticket, *, status: int = 200, **extra
) -> HttpResponse:
    ticket = (
        Ticket.objects.select_related("order", "opened_by", "claimed_by")
        .prefetch_related(ORDER_LINKS)
        .get(pk=ticket.pk)
    )
    context = _ticket_context(request, ticket) | extra
    if status == 200 and (ticket.is_final or ticket.status == Ticket.Status.FAILED):
        status = HttpResponseStopPolling.status_code  # nothing left to wait for
    return render(request, "reviews/ticket.html#status", context, status=status)


@require_GET
@login_required
@vary_on_headers("HX-Request", "HX-Target")
def ticket_detail(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    ticket = get_object_or_404(
        permissions.visible(request.user)
        .select_related("order", "opened_by", "claimed_by")
        .prefetch_related(ORDER_LINKS),
        pk=ticket_id,
    )
    if request.htmx.target == TICKET_STATUS:
        return ticket_status_fragment(request, ticket)
    if request.htmx.target == f"outcome-{ticket.pk}":
        return _review_outcome(request, ticket, request.GET.get("seen", ""))
    return render(request, "reviews/ticket.html", _ticket_context(request, ticket))


def _review_outcome(request: HtmxHttpRequest, ticket: Ticket, seen: str) -> HttpResponse:
    """How the review a reviewer lost to a colleague ended: 204 (the banner stays) until it has."""
    outcome = selectors.review_outcome(ticket, seen, now=timezone.now())
    if outcome is None:
        return HttpResponse(status=204)
    context = {"ticket": ticket, "outcome": outcome}
    response = render(request, "reviews/queue.html#review-outcome", context)
    response.status_code = HttpResponseStopPolling.status_code
    return response


@require_GET
@login_required
def parts_total(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    """What one order's parts form comes to as the reviewer changes it, by the decision's rule
    (policy.parts_checked): 400 with its words when the decision would refuse them."""
    ticket = get_object_or_404(permissions.visible(request.user), pk=ticket_id)
    payload = ticket.pending_payload if isinstance(ticket.pending_payload, dict) else {}
    if ticket.status != Ticket.Status.AWAITING_REVIEW or not payload.get("orders"):
        error = services.NOT_PENDING
        return render(request, "reviews/_parts_total.html", {"error": error}, status=409)
    by_number = {str(o["number"]): o for o in payload["orders"]}
    try:
        answers = parts_answers(request.GET, payload["orders"])
        if len(answers) != 1:
            raise ValueError("Send the parts of one open order of this review.")
        [(number, answer)] = answers.items()
        order = by_number[number]["order"]
        parts = policy.parts_checked(order, answer["parts"])
    except ValueError as exc:
        return render(request, "reviews/_parts_total.html", {"error": str(exc)}, status=400)
    context = proposal_sums({"order": order, "parts": parts})
    return render(request, "reviews/_parts_total.html", context)
