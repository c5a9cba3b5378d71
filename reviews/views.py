from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import (
    HttpResponseClientRedirect,
    HttpResponseStopPolling,
    trigger_client_event,
)
from django_htmx.middleware import HtmxDetails

from refunds import permissions, selectors, services
from refunds.models import (
    ApiToken,
    Decision,
    Ticket,
    user_roles,
)

RECENT = 10
QUEUE_PAGE = 50
COUNT_CAP = 1000
TICKET_STATUS = "ticket-status"  # the ticket page's polled region, also a target of its form


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _with_pending_decisions(tickets: list[Ticket]) -> list[Ticket]:
    """Note on each ticket the decision already recorded for its pending review, if any.

    A decision is recorded at once but applied by a worker a moment later; until then the ticket
    still awaits review, and showing its buttons again would invite a second answer (a 409)."""
    waiting = [t for t in tickets if t.status == Ticket.Status.AWAITING_REVIEW]
    by_interrupt = {
        d.interrupt_id: d
        for d in Decision.objects.filter(
            interrupt_id__in=[t.pending_interrupt_id for t in waiting if t.pending_interrupt_id]
        ).select_related("reviewer")
    }
    for ticket in tickets:
        ticket.pending_decision = (
            by_interrupt.get(ticket.pending_interrupt_id) if ticket in waiting else None
        )
    return tickets


def _queue_context(request: HtmxHttpRequest) -> dict:
    reviewable = permissions.reviewable(request.user).select_related("order")
    return {
        "reviews": _with_pending_decisions(list(reviewable.order_by("id")[:QUEUE_PAGE])),
        # Counted up to a cap: the page's cost must not grow with a backlog of 10,000 reviews.
        "review_count": reviewable[: COUNT_CAP + 1].count(),
        "count_cap": COUNT_CAP,
        "recent": permissions.visible(request.user)
        .filter(opened_by=request.user)
        .select_related("order")[:RECENT],
        "roles": sorted(user_roles(request.user)),
        "scope": _queue_scope(request.user),
    }


def _queue_scope(user) -> str:
    """One sentence on what this user's queue holds, so an empty queue is not a mystery."""
    agent, manager = permissions.is_agent(user), permissions.is_manager(user)
    if permissions.is_admin(user) or (agent and manager):
        return (
            "You see every pending review: support agents decide refunds of $20.00 or less, "
            "managers the larger ones and those the policy flags."
        )
    if agent:
        return "You decide refunds of $20.00 or less; larger and flagged ones go to managers."
    if manager:
        return (
            "You decide refunds over $20.00 and those the policy flags; smaller ones go to "
            "support agents."
        )
    return "You are in no reviewer group, so no review waits on you; you can still open tickets."


@require_GET
@login_required
def queue(request: HtmxHttpRequest) -> HttpResponse:
    """The review queue page; its regions poll this same URL for their fragments."""
    context = _queue_context(request)
    if request.htmx.target == "queue-rows":
        return render(request, "reviews/_queue_rows.html", context)
    if request.htmx.target == "recent-tickets":
        return render(request, "reviews/_recent_tickets.html", context)
    return render(request, "reviews/queue.html", context)


@require_POST
@login_required
def decide(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    """Approve and Reject are two named buttons of one form, in a queue row or on the ticket
    page; htmx gets back the region it targets, a plain POST a redirect to where it came from."""
    ticket = get_object_or_404(
        permissions.visible(request.user).select_related("order"), pk=ticket_id
    )
    answer = next((a for a in ("approve", "reject") if a in request.POST), "")
    try:
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=request.POST.get("interrupt_id", ""),
            answer=answer,
            reason=request.POST.get("reason", ""),
            reviewer=request.user,
        )
    except PermissionDenied as exc:
        return _decision_error(request, ticket, str(exc), status=403)
    except services.AlreadyDecided as exc:
        return _decision_error(request, ticket, str(exc), status=409)
    except services.RefundError as exc:
        return _decision_error(request, ticket, str(exc), status=400)
    if answer == "approve":
        text = f"Approved the refund on order {ticket.order.number}; it is being paid out."
    else:
        text = f"Rejected the refund on order {ticket.order.number}."
    if request.htmx.target == TICKET_STATUS:
        response = _ticket_status(request, ticket, flash=text)
    elif request.htmx:
        response = render(request, "reviews/_decided_row.html", {"ticket": ticket, "text": text})
    else:
        messages.success(request, text)
        return _back(request, ticket)
    return trigger_client_event(response, "queueChanged")


def _decision_error(request: HtmxHttpRequest, ticket: Ticket, text: str, *, status: int):
    if request.htmx.target == TICKET_STATUS:
        return _ticket_status(request, ticket, error=text, status=status)
    if request.htmx:
        context = {
            "ticket": _with_pending_decisions([ticket])[0],
            "error": text,
            "may_decide": not permissions.decision_refusal(request.user, ticket),
        }
        response = render(request, "reviews/_decision_error.html", context, status=status)
        # Swapped although it is a 4xx: base.html's htmx-config lets 400/403/409 through. The
        # message also goes to #messages, since the queue's next poll replaces the row.
        response["HX-Retarget"] = f"#review-{ticket.pk}"
        response["HX-Reswap"] = "outerHTML"
        return response
    if status == 403:
        raise PermissionDenied(text)
    messages.error(request, f"Order {ticket.order.number}: {text}")
    return _back(request, ticket)


def _back(request: HtmxHttpRequest, ticket: Ticket) -> HttpResponse:
    if request.POST.get("back") == "ticket":
        return redirect("reviews:ticket", ticket_id=ticket.pk)
    return redirect("reviews:queue")


@require_http_methods(["GET", "POST"])
@login_required
def ticket_new(request: HtmxHttpRequest) -> HttpResponse:
    values = {"order_number": "", "note": ""}
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in values}
        try:
            ticket = services.ticket_open(opened_by=request.user, **values)
        except services.TicketAlreadyOpen as exc:
            messages.info(request, str(exc))
            url = reverse("reviews:ticket", args=[exc.ticket.pk])
            if request.htmx:
                return HttpResponseClientRedirect(url)
            return redirect(url)
        except services.RefundError as exc:
            context = {"error": str(exc), "values": values}
            template = "reviews/_ticket_form.html" if request.htmx else "reviews/ticket_new.html"
            return render(request, template, context, status=400)
        text = f"Opened ticket {ticket.pk} for order {ticket.order.number}."
        if request.htmx:
            context = {"opened": ticket, "values": {}}
            response = render(request, "reviews/_ticket_form.html", context)
            return trigger_client_event(response, "ticketsChanged")
        messages.success(request, text)
        return redirect("reviews:ticket", ticket_id=ticket.pk)
    return render(request, "reviews/ticket_new.html", {"values": values})


def _ticket_context(request: HtmxHttpRequest, ticket: Ticket) -> dict:
    return {
        "ticket": _with_pending_decisions([ticket])[0],
        "decisions": ticket.decisions.select_related("reviewer"),
        "charges": ticket.charges.all(),
        "emails": ticket.emails.all(),
        "may_decide": not permissions.decision_refusal(request.user, ticket),
        "earlier": selectors.earlier_tickets(ticket),
        "is_admin": permissions.is_admin(request.user),
    }


def _ticket_status(
    request: HtmxHttpRequest, ticket: Ticket, *, status: int = 200, **extra
) -> HttpResponse:
    ticket.refresh_from_db()
    context = _ticket_context(request, ticket) | extra
    if status == 200 and (ticket.is_final or ticket.status == Ticket.Status.FAILED):
        status = HttpResponseStopPolling.status_code  # nothing left to wait for
    return render(request, "reviews/_ticket_status.html", context, status=status)


@require_GET
@login_required
def ticket_detail(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    ticket = get_object_or_404(
        permissions.visible(request.user).select_related("order", "opened_by"), pk=ticket_id
    )
    if request.htmx.target == TICKET_STATUS:
        return _ticket_status(request, ticket)
    return render(request, "reviews/ticket.html", _ticket_context(request, ticket))


@require_POST
@login_required
def email_resend(request: HtmxHttpRequest, ticket_id: int, email_id: int) -> HttpResponse:
    """Admins: send an undelivered email of a finished ticket again (through the outbox)."""
    ticket = get_object_or_404(permissions.visible(request.user), pk=ticket_id)
    email = get_object_or_404(ticket.emails, pk=email_id)
    try:
        services.email_resend(email_id=email.pk, by=request.user)
    except PermissionDenied:
        raise
    except services.RefundError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Sending “{email.subject}” to {email.to} again.")
    return redirect("reviews:ticket", ticket_id=ticket.pk)


@require_http_methods(["GET", "POST"])
@login_required
def api_token(request: HtmxHttpRequest) -> HttpResponse:
    """Make (or replace) the user's API key. Only its hash is stored, so the key is shown in the
    answer to the POST that made it, once, and never again."""
    token = ApiToken.objects.filter(user=request.user).first()
    key = ""
    if request.method == "POST":
        token, key = ApiToken.issue(request.user)
    response = render(request, "reviews/api_token.html", {"token": token, "key": key})
    response["Cache-Control"] = "no-store"  # the key must not stay in a cache
    return response
