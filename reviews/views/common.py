"""What the desk's pages share: the typed request, page sizes, pending decisions, the way back."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django_htmx.middleware import HtmxDetails

from refunds.models import CannedReason, Decision, Ticket, TicketOrder

RECENT = 10
QUEUE_PAGE = 25
TICKETS_PAGE = 25
AUDIT_PAGE = 50
COUNT_CAP = 1000


# A list's tickets with every order they cover, in one query for the page (ticket.links).
ORDER_LINKS = Prefetch("links", queryset=TicketOrder.objects.select_related("order"))

TICKET_STATUS = "ticket-status"  # the ticket page's polled region, also a target of its form


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


class AuthenticatedRequest(HtmxHttpRequest):
    """A request to a @login_required view: its user is signed in."""

    user: User


def with_pending_decisions(tickets: list[Ticket]) -> list[Ticket]:
    """Note on each ticket the decision already recorded for its pending review: until a worker
    applies it, showing the buttons again would invite a second answer (a 409)."""
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


def row_extras() -> dict:
    return {
        "canned": list(CannedReason.objects.rejecting()),
        "warn_after": timedelta(minutes=settings.REFUNDS_REVIEW_WARN_MINUTES),
        "now": timezone.now(),
    }


def pressed(post, buttons: tuple[str, ...]) -> str:
    """Which of a form's named buttons was pressed; "" for none; "both" for two."""
    names = [name for name in buttons if name in post]
    if len(names) > 1:
        return "both"
    return names[0] if names else ""


def form_errors(form) -> str:
    """A refused form's messages as one sentence for the flash or the row."""
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


def back(request: HtmxHttpRequest, ticket: Ticket) -> HttpResponse:
    if request.POST.get("back") == "ticket":
        return redirect("reviews:ticket", ticket_id=ticket.pk)
    return redirect("reviews:queue")
