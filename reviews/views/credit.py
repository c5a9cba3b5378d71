"""The customer's page of an offer of store credit, reached by the signed link in its email: a
GET only shows the choice (mail scanners open links), a POST makes it. In their language."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import translation
from django.views.decorators.http import require_http_methods

from refunds import emails
from refunds.services import RefundError, credit


@require_http_methods(["GET", "POST"])
def credit_choose(request: HttpRequest, signed: str) -> HttpResponse:
    try:
        offer = credit.offer_of_link(signed)
    except RefundError as exc:
        return render(request, "credit/choose.html", {"error": str(exc)}, status=404)
    ticket = offer.ticket
    with translation.override(emails.language((ticket.reading or {}).get("language") or "")):
        said, error, status = "", "", 200
        if request.method == "POST":
            try:
                said = credit.credit_choose(
                    offer=offer, choice=request.POST.get("choice", ""), source="link"
                )
            except RefundError as exc:
                error, status = str(exc), 409
        payload = ticket.pending_payload if isinstance(ticket.pending_payload, dict) else {}
        waiting = payload.get("offer_id") == offer.decision_id and offer.chosen_at is None
        context = {
            "offer": offer,
            "order": ticket.order,
            "money_cents": payload.get("money_cents"),
            "credit_cents": payload.get("credit_cents"),
            "waiting": waiting and not said,
            "said": said,
            "error": error,
        }
        response = render(request, "credit/choose.html", context, status=status)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "same-origin"  # the link is the key: never sent elsewhere
    return response
