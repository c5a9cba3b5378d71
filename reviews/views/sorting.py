"""The desk's side of the intake: "Needs sorting", and a misread message sent back from a review."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from intake import forms, selectors, sorting
from intake.models import Message
from refunds import permissions, policy, services
from refunds.models import CannedReason
from reviews import paging
from reviews.forms import order_numbers_typed
from reviews.views.common import HtmxHttpRequest, form_errors, pressed
from reviews.views.queue import answered, decision_error, refusal_status

PAGE = 20
LIST = "needs-sorting-list"  # the page's region that its pager and its actions refresh
FOLD_AT = 600  # a body longer than this shows its start, the rest behind "Show all"


def _card(message: Message, replies: list | None = None, **extra: Any) -> dict[str, Any]:
    reading = message.reading or {}
    read_reason = reading.get("reason")
    choices = selectors.order_choices(message)
    # Ticked already: the sender's own orders the reader found; another customer's is ticked
    # only by a person who means it.
    mine = [c["number"] for c in choices if c["read"] and c["order"] and not c["other_customer"]]
    values = {
        "orders": mine,
        "more_orders": "",
        "reason": read_reason if read_reason in policy.TICKET_REASONS else "",
        "other_customer_ok": False,
    }
    return {
        "m": message,
        "choices": choices,
        "values": values | extra.pop("values", {}),
        "fold": len(message.body) > FOLD_AT,
        "fold_at": FOLD_AT,
        "reasons": [(r, policy.REASONS[r]) for r in policy.TICKET_REASONS],
        "replies": list(CannedReason.objects.setting_aside()) if replies is None else replies,
        "reply_max": sorting.REPLY_MAX,
        **extra,
    }


def _page_context(
    request: HtmxHttpRequest, errors: dict[int, dict[str, Any]] | None = None
) -> dict[str, Any]:
    page = paging.capped_page(
        request,
        selectors.messages_needing_sorting().select_related("handled_by"),
        size=PAGE,
        cap=selectors.COUNT_CAP,
    )
    replies = list(CannedReason.objects.setting_aside())
    cards = [_card(m, replies, **(errors or {}).get(m.pk, {})) for m in page]
    return {"cards": cards, **paging.page_context(request, page)}


@require_GET
@login_required
@vary_on_headers("HX-Request", "HX-Target")
def needs_sorting(request: HtmxHttpRequest) -> HttpResponse:
    """Messages the intake could not place, newest first; its pager asks for the list alone."""
    permissions.deny(permissions.sort_refusal(request.user))
    context = _page_context(request)
    if request.htmx.target == LIST:
        return render(request, "intake/needs_sorting.html#list", context)
    return render(request, "intake/needs_sorting.html", context)


@require_POST
@login_required
def message_sort(request: HtmxHttpRequest, message_id: int) -> HttpResponse:
    """ "Open the ticket" and "Not a refund request": named buttons of one form, one view."""
    permissions.deny(permissions.sort_refusal(request.user))
    message = get_object_or_404(selectors.messages_visible(request.user), pk=message_id)
    form = forms.SortForm(request.POST)
    action = pressed(request.POST, ("open", "not_refund"))
    values: dict[str, Any] = {}
    try:
        if not form.is_valid():
            raise sorting.SortingError(form_errors(form))
        data = form.cleaned_data
        values = data | {"orders": data["order"]}
        if action == "both":
            raise sorting.SortingError("Choose either open the ticket or not a refund, not both.")
        if action == "not_refund":
            sorting.message_mark_not_refund(
                message=message,
                by=request.user,
                canned=data["reply_canned"],
                words=data["reply_words"],
                no_reply_why=data["no_reply_why"],
            )
            text = f"Set the message from {message.sender} aside as not a refund request" + (
                "; no reply sent." if data["no_reply_why"] else "; the reply goes to them now."
            )
            ticket = None
        elif action == "open":
            numbers = list(data["order"]) + order_numbers_typed(data["more_orders"])
            done = sorting.message_sort(
                message=message,
                order_numbers=numbers,
                reason=data["reason"],
                by=request.user,
                other_customer_ok=data["other_customer_ok"],
            )
            text = sorting.placed_words(done)
            ticket = done.first
        else:
            raise sorting.SortingError("Choose open the ticket or not a refund request.")
    except services.RefundError as exc:
        return _sort_error(request, message, str(exc), values)
    if request.htmx:
        context = {"m": message, "text": text, "ticket": ticket, "undo": action == "not_refund"}
        response = render(request, "intake/needs_sorting.html#message-done", context)
        return trigger_client_event(response, "messagesChanged")
    messages.success(request, text)
    return redirect("reviews:needs_sorting")


@require_GET
@login_required
def set_aside(request: HtmxHttpRequest) -> HttpResponse:
    """Messages set aside as not a refund request, latest first, each with its Undo."""
    permissions.deny(permissions.sort_refusal(request.user))
    page = paging.capped_page(
        request,
        selectors.messages_set_aside(request.user).select_related("handled_by"),
        size=PAGE,
        cap=selectors.COUNT_CAP,
    )
    rows = [(m, sorting.set_aside_event(m)) for m in page]
    return render(
        request, "intake/set_aside.html", {"rows": rows, **paging.page_context(request, page)}
    )


@require_POST
@login_required
def set_aside_undo(request: HtmxHttpRequest, message_id: int) -> HttpResponse:
    """Undo a setting aside: the message goes back to "Needs sorting"; a reply sent stays sent."""
    permissions.deny(permissions.sort_refusal(request.user))
    message = get_object_or_404(selectors.messages_visible(request.user), pk=message_id)
    try:
        sorting.message_set_aside_undo(message=message, by=request.user)
    except services.RefundError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"The message from {message.sender} is back in Needs sorting. "
            "A reply sent when it was set aside stays sent.",
        )
    return redirect("reviews:message", message_id=message.pk)


def _sort_error(
    request: HtmxHttpRequest, message: Message, text: str, values: dict[str, Any]
) -> HttpResponse:
    message.refresh_from_db()
    card: dict[str, Any] = {"error": text, "values": values}
    if request.htmx:
        context = _card(message, None, **card)
        return render(request, "intake/needs_sorting.html#message", context, status=400)
    context = _page_context(request, {message.pk: card})
    if not any(c["m"].pk == message.pk for c in context["cards"]):
        messages.error(request, text)  # sorted meanwhile (or on another page): say it on top
    return render(request, "intake/needs_sorting.html", context, status=400)


@require_POST
@login_required
def send_back(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    """A misread message back to "Needs sorting"; the review ends rejected (the decision path)."""
    ticket = get_object_or_404(
        permissions.visible(request.user).select_related("order", "claimed_by"), pk=ticket_id
    )
    form = forms.SendBackForm(request.POST)
    try:
        if not form.is_valid():
            raise sorting.SortingError(form_errors(form))
        sorting.message_send_back(ticket=ticket, why=form.cleaned_data["why"], by=request.user)
    except (PermissionDenied, services.RefundError) as exc:
        return decision_error(request, ticket, str(exc), status=refusal_status(exc))
    text = (
        f"Sent the message about order {ticket.order.number} back to Needs sorting; "
        "the review ends rejected."
    )
    context = {"ticket": ticket, "text": text, "line": text}
    return answered(request, ticket, text, "reviews/queue.html#decided-row", context)
