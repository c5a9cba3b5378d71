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
from refunds.models import AuditEvent
from reviews import forms, paging
from reviews.trail import audit_what, audit_who
from reviews.views.common import AUDIT_PAGE, COUNT_CAP, HtmxHttpRequest


def _audit_filters(request: HttpRequest):
    if not permissions.oversees(request.user):
        raise PermissionDenied("The audit trail is for managers and admins.")
    search = forms.AuditSearch(request.GET or None)
    # The form's fields are the selector's filters, by name.
    return search, selectors.audit_events(**(search.cleaned_data if search.is_valid() else {}))


@require_GET
@login_required
def audit(request: HtmxHttpRequest) -> HttpResponse:
    """The audit trail of the whole desk, for managers and admins, filterable and exportable."""
    search, events = _audit_filters(request)
    # Capped, as the trail only grows; each row names all its ticket's orders.
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
                    audit_what(e),  # an ask, a reminder, a reply, no reply: by what it is
                    # Django lets a user name start with @ + or -, a formula to a spreadsheet.
                    _csv_safe(audit_who(e)),
                    dollars(moment_cents(e)),
                    _csv_safe(_answer_cell(e)),  # an order number is the shop's text
                    _csv_safe(_reason_cell(e)),
                    _csv_safe(e.note),
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="refund-desk-audit.csv"'
    return response


def moment_cents(event) -> int | None:
    """The amount at the event's moment (on older rows, from what it answered), never today's."""
    if event.amount_cents is not None:
        return event.amount_cents
    answer, seen = event.answer or {}, event.seen or {}
    return (
        answer.get("amount_cents")
        or seen.get("amount_cents")
        or (seen.get("review") or {}).get("amount_cents")
    )


def _answer_cell(event) -> str:
    """ "approve", "reject", "ask", "reply", "no_reply", or per order "1042 approve; 1044 …"."""
    answer = event.answer or {}
    orders = answer.get("orders")
    if isinstance(orders, dict) and len(orders) > 1:
        return "; ".join(f"{number} {one.get('answer', '')}" for number, one in orders.items())
    if event.action == AuditEvent.Action.REPLY:  # the customer's or the timer's: no "answer"
        return "no_reply" if answer.get("no_reply") else "reply"
    return answer.get("answer", "") or answer.get("to", "")


def _reason_cell(event) -> str:
    """The reason the customer was sent; per order, each rejected order's own."""
    answer = event.answer or {}
    orders = answer.get("orders")
    if isinstance(orders, dict) and len(orders) > 1:
        return "; ".join(
            f"{number}: {one['reason']}" for number, one in orders.items() if one.get("reason")
        )
    return answer.get("reason", "") or answer.get("question", "")  # an ask: its question


def _csv_safe(text: str) -> str:
    # A cell starting with = + - @ (or a tab or CR before one) is a formula to a spreadsheet.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
