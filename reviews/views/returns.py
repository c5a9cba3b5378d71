"""The returns page: the shop's staff scan a parcel's reference and say what came back of it,
through the one service every door calls (refunds.services.return_arrived)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from refunds import permissions, selectors, services
from refunds.models import ReturnRequest
from refunds.services.returns import REASON_MAX, Status
from reviews.forms import ReturnForm, return_backs, return_field
from reviews.views.common import HtmxHttpRequest, form_errors, pressed

BUTTONS = ("received", "flagged")


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def returns(request: HtmxHttpRequest) -> HttpResponse:
    """GET ?reference= finds a return; POST says what came back of it."""
    permissions.deny(permissions.return_refusal(request.user))
    if request.method == "POST":
        return _arrived(request)
    typed = request.GET.get("reference", "")
    context: dict[str, Any] = {"typed": typed}
    if typed.strip():
        try:
            context |= _shown(services.return_find(typed))
        except services.RefundError as exc:
            context["error"] = str(exc)
    return _page(request, context)


def _arrived(request: HtmxHttpRequest) -> HttpResponse:
    form = ReturnForm(request.POST)
    button = pressed(request.POST, BUTTONS)
    typed = request.POST.get("reference", "")
    found: ReturnRequest | None = None
    try:
        if not form.is_valid():
            raise services.RefundError(form_errors(form))
        found = services.return_find(form.cleaned_data["reference"])
        if button not in BUTTONS:
            raise services.RefundError("Press Received or Flagged.")
        status: Status = "received" if button == "received" else "flagged"
        lines = None
        if status == "received":
            try:
                lines = return_backs(request.POST, selectors.return_lines(found))
            except ValueError as exc:
                raise services.RefundError(str(exc)) from None
        arrival = services.return_arrived(
            reference=found.reference,
            status=status,
            lines=lines,
            reason=form.cleaned_data["reason"],
            by=request.user,
            source="page",
        )
    except services.RefundError as exc:
        context: dict[str, Any] = {"typed": typed, "error": str(exc)}
        if found is not None:  # what was typed stays, to be mended
            context |= _shown(found, request.POST)
        return _page(request, context, status=400)
    said = selectors.arrival_words(arrival, status)
    if not request.htmx:
        messages.success(request, said)
        query = urlencode({"reference": arrival.reference})
        return redirect(f"{reverse('reviews:returns')}?{query}")
    found.refresh_from_db()
    return _page(request, {"flash": said, **_shown(found)})


def _shown(found: ReturnRequest, posted=None) -> dict[str, Any]:
    """A return's card: its lines, each box holding what was typed or else all asked back."""
    rows = []
    for line in selectors.return_lines(found):
        name = return_field(line)
        rows.append((line, name, posted.get(name, "") if posted else line.quantity))
    return {
        "found": found,
        "state": selectors.return_state(found),
        "rows": rows,
        "several": len(found.orders) > 1,
        "reason": posted.get("reason", "") if posted else "",
        "reason_max": REASON_MAX,
    }


def _page(request: HtmxHttpRequest, context: dict[str, Any], *, status: int = 200) -> HttpResponse:
    template = "reviews/returns.html#returns" if request.htmx else "reviews/returns.html"
    return render(request, template, context, status=status)
