"""The audit trail: filtered pages and the CSV export."""

from __future__ import annotations

import csv
from datetime import UTC

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from refunds import permissions, selectors
from refunds.flow.words import dollars
from reviews import forms, paging
from reviews.views.common import AUDIT_PAGE, COUNT_CAP, HtmxHttpRequest


def _audit_filters(request: HttpRequest):
    search = forms.AuditSearch(request.GET or None)
    wanted = search.cleaned_data if search.is_valid() else {}
    return search, selectors.audit_events(
        action=wanted.get("action", ""),
        actor=wanted.get("actor", ""),
        ticket=wanted.get("ticket"),
        since=wanted.get("since"),
        until=wanted.get("until"),
    )


@require_GET
@login_required
def audit(request: HtmxHttpRequest) -> HttpResponse:
    """The audit trail of the whole desk, for managers and admins, filterable and exportable."""
    if not permissions.can_read_audit(request.user):
        raise PermissionDenied("The audit trail is for managers and admins.")
    search, events = _audit_filters(request)
    # Capped: the trail only grows.
    # Each row names its ticket by all of its orders: one query for the page's links.
    events = events.prefetch_related("ticket__links__order")
    page = paging.capped_page(request, events, size=AUDIT_PAGE, cap=COUNT_CAP)
    context = {"search": search, "events": page, **paging.page_context(request, page)}
    return render(request, "reviews/audit.html", context)


class _Echo:
    def write(self, value: str) -> str:
        return value


@require_GET
@login_required
def audit_export(request: HtmxHttpRequest) -> StreamingHttpResponse:
    """The filtered audit trail as CSV, streamed (times in UTC, ISO 8601; amounts in dollars)."""
    if not permissions.can_read_audit(request.user):
        raise PermissionDenied("The audit trail is for managers and admins.")
    _, events = _audit_filters(request)
    writer = csv.writer(_Echo())
    header = ["at_utc", "ticket", "order", "action", "who", "amount", "answer", "reason", "note"]

    def rows():
        yield writer.writerow(header)
        for e in events.iterator(chunk_size=500):
            yield writer.writerow(
                [
                    e.at.astimezone(UTC).isoformat(timespec="seconds"),
                    e.ticket_id,
                    _csv_safe(e.ticket.order.number),  # the shop's text, as imported
                    e.get_action_display(),
                    # Django lets a user name start with @ + or -, a formula to a spreadsheet.
                    _csv_safe(e.actor.username) if e.actor else "the desk",
                    dollars(e.answer.get("amount_cents") or e.ticket.amount_cents),
                    e.answer.get("answer", "") or e.answer.get("to", ""),
                    _csv_safe(e.answer.get("reason", "")),
                    _csv_safe(e.note),
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="refund-desk-audit.csv"'
    return response


def _csv_safe(text: str) -> str:
    # A cell starting with = + - @ (or a tab or carriage return before one) is a formula to a
    # spreadsheet: quote it as text.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
