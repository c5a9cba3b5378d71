from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling, trigger_client_event
from django_htmx.middleware import HtmxDetails

from refunds import services
from refunds.models import ApiToken, Ticket, may_decide, user_roles

RECENT = 10
QUEUE_PAGE = 50


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _queue_context(request: HtmxHttpRequest) -> dict:
    reviewable = Ticket.objects.reviewable_by(request.user).select_related("order")
    return {
        "reviews": reviewable.order_by("id")[:QUEUE_PAGE],
        "review_count": reviewable.count(),
        "recent": Ticket.objects.filter(opened_by=request.user).select_related("order")[:RECENT],
        "roles": sorted(user_roles(request.user)),
    }


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
    """Approve and Reject are two named buttons of one form."""
    ticket = get_object_or_404(Ticket, pk=ticket_id)
    answer = "approve" if "approve" in request.POST else "reject" if "reject" in request.POST else ""
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
    if request.htmx:
        response = render(request, "reviews/_decided_row.html", {"ticket": ticket, "text": text})
        return trigger_client_event(response, "queueChanged")
    messages.success(request, text)
    return redirect("reviews:queue")


def _decision_error(request: HtmxHttpRequest, ticket: Ticket, text: str, *, status: int):
    if request.htmx:
        context = {
            "ticket": ticket,
            "error": text,
            "may_decide": may_decide(request.user, ticket.required_role),
        }
        response = render(request, "reviews/_decision_error.html", context, status=status)
        # Swapped although it is a 4xx: base.html's htmx-config lets 400/403/409 through. The
        # message also goes to #messages, since the queue's next poll replaces the row.
        response["HX-Retarget"] = f"#review-{ticket.pk}"
        response["HX-Reswap"] = "outerHTML"
        return response
    if status == 403:
        raise PermissionDenied(text)
    messages.error(request, text)
    return redirect("reviews:queue")


@require_http_methods(["GET", "POST"])
@login_required
def ticket_new(request: HtmxHttpRequest) -> HttpResponse:
    values = {"order_number": "", "note": ""}
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in values}
        try:
            ticket = services.ticket_open(opened_by=request.user, **values)
        except services.RefundError as exc:
            context = {"error": str(exc), "values": values}
            template = "reviews/_ticket_form.html" if request.htmx else "reviews/ticket_new.html"
            return render(request, template, context, status=400)
        text = f"Opened ticket {ticket.pk} for order {ticket.order.number}."
        if request.htmx:
            response = render(request, "reviews/_ticket_form.html", {"opened": ticket, "values": {}})
            return trigger_client_event(response, "ticketsChanged")
        messages.success(request, text)
        return redirect("reviews:ticket", ticket_id=ticket.pk)
    return render(request, "reviews/ticket_new.html", {"values": values})


@require_GET
@login_required
def ticket_detail(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    ticket = get_object_or_404(Ticket.objects.select_related("order", "opened_by"), pk=ticket_id)
    context = {
        "ticket": ticket,
        "decisions": ticket.decisions.select_related("reviewer"),
        "charges": ticket.charges.all(),
        "emails": ticket.emails.all(),
        "may_decide": may_decide(request.user, ticket.required_role),
    }
    if request.htmx.target == "ticket-status":
        if ticket.is_final or ticket.status == Ticket.Status.FAILED:
            response = render(request, "reviews/_ticket_status.html", context)
            response.status_code = HttpResponseStopPolling.status_code
            return response
        return render(request, "reviews/_ticket_status.html", context)
    return render(request, "reviews/ticket.html", context)


@require_http_methods(["GET", "POST"])
@login_required
def api_token(request: HtmxHttpRequest) -> HttpResponse:
    token = ApiToken.objects.filter(user=request.user).first()
    if request.method == "POST":
        if token:
            token.delete()
        token = ApiToken.for_user(request.user)
        messages.success(request, "A new API token was created; the old one no longer works.")
        return redirect("reviews:api_token")
    return render(request, "reviews/api_token.html", {"token": token})
