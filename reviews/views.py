from __future__ import annotations

import csv
import hashlib
from datetime import UTC, timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import (
    HttpResponseClientRedirect,
    HttpResponseStopPolling,
    trigger_client_event,
)
from django_htmx.middleware import HtmxDetails

from refunds import permissions, selectors, services
from refunds.flow.words import dollars
from refunds.models import (
    ApiToken,
    CannedReason,
    Decision,
    Ticket,
    user_roles,
)
from reviews import forms

RECENT = 10
QUEUE_PAGE = 25
TICKETS_PAGE = 25
AUDIT_PAGE = 50
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
    cover = request.GET.get("cover") == "1" and permissions.is_manager(request.user)
    reviewable = permissions.reviewable(request.user, cover=cover)
    # Oldest first: a queue is worked from the longest wait. Counted up to a cap: the page's
    # cost must not grow with a backlog of 10,000 reviews.
    review_count = reviewable[: COUNT_CAP + 1].count()
    pages = max((min(review_count, COUNT_CAP) + QUEUE_PAGE - 1) // QUEUE_PAGE, 1)
    page = min(_page_number(request), pages)
    rows = list(
        reviewable.select_related("order", "claimed_by", "opened_by").order_by(
            "review_since", "id"
        )[(page - 1) * QUEUE_PAGE : page * QUEUE_PAGE]
    )
    reviews = _with_pending_decisions(rows)
    return {
        "reviews": reviews,
        "review_count": review_count,
        "count_cap": COUNT_CAP,
        "page": page,
        "pages": pages,
        "cover": cover,
        "may_cover": permissions.is_manager(request.user)
        and not permissions.is_agent(request.user),
        "version": _queue_version(reviews, review_count, page),
        "recent": permissions.visible(request.user)
        .filter(opened_by=request.user)
        .select_related("order")[:RECENT],
        "roles": sorted(user_roles(request.user)),
        "scope": _queue_scope(request.user),
        "canned": list(CannedReason.objects.filter(active=True)),
        "warn_after": timedelta(minutes=settings.REFUNDS_REVIEW_WARN_MINUTES),
        "now": timezone.now(),
    }


def _page_number(request: HttpRequest) -> int:
    raw = request.GET.get("page", "1")
    return max(int(raw), 1) if raw.isdigit() and len(raw) < 7 else 1


def _queue_version(reviews: list[Ticket], count: int, page: int) -> str:
    """What the rows show, as a short digest: a poll that carries the same one gets a 204 and
    the browser keeps its rows (and the reviewer's half-typed reason) untouched."""
    now = timezone.now()
    warn = timedelta(minutes=settings.REFUNDS_REVIEW_WARN_MINUTES)
    parts = [str(count), str(page)]
    for t in reviews:
        holder = t.claim_holder(now)
        late = bool(t.review_since and now - t.review_since > warn)
        decided = getattr(t, "pending_decision", None)
        parts.append(
            f"{t.pk}:{t.pending_interrupt_id}:{holder.pk if holder else ''}:"
            f"{t.escalated_for}:{late}:{decided.pk if decided else ''}"
        )
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


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
@vary_on_headers("HX-Request", "HX-Target")
def queue(request: HtmxHttpRequest) -> HttpResponse:
    """The review queue page; its regions poll this same URL for their fragments. A rows poll
    that names the version it shows gets 204 (nothing to swap) until something changed."""
    context = _queue_context(request)
    if request.htmx.target == "queue-rows":
        if request.GET.get("v") == context["version"]:
            return HttpResponse(status=204)
        response = render(request, "reviews/_queue_rows.html", context)
        # The rows changed: the recent tickets beside them refresh now too, not on their own
        # clock, so a review in the queue never sits beside a ticket still shown as "Running".
        return trigger_client_event(response, "ticketsChanged")
    if request.htmx.target == "recent-tickets":
        return render(request, "reviews/_recent_tickets.html", context)
    return render(request, "reviews/queue.html", context)


@require_POST
@login_required
def decide(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    """Approve, Reject and Escalate: named buttons of one form, in a queue row or on the ticket
    page; htmx gets back the region it targets, a plain POST a redirect to where it came from."""
    ticket = get_object_or_404(
        permissions.visible(request.user).select_related("order", "claimed_by"), pk=ticket_id
    )
    form = forms.DecideForm(request.POST)
    answer = form.answer(request.POST)
    try:
        if not form.is_valid():
            raise services.RefundError(
                " ".join(str(e) for errors in form.errors.values() for e in errors)
            )
        data = form.cleaned_data
        if answer == "both":
            raise services.RefundError("Choose either approve or reject, not both.")
        if answer == "escalate":
            services.ticket_escalate(ticket=ticket, by=request.user, note=data["note"])
            text = f"Escalated the review of order {ticket.order.number} to managers."
        else:
            try:
                amount = forms.cents(data["amount"]) if answer == "approve" else None
            except ValueError as exc:
                raise services.RefundError(str(exc)) from None
            if amount is not None and amount == ticket.amount_cents:
                amount = None  # unchanged: a plain approval
            services.ticket_decide(
                ticket=ticket,
                interrupt_id=data["interrupt_id"],
                answer=answer,
                reason=data["reason"],
                note=data["note"],
                canned=data["canned"],
                amount_cents=amount,
                reviewer=request.user,
            )
            if amount is not None:
                text = (
                    f"Approved {dollars(amount)} (instead of {dollars(ticket.amount_cents)}) on "
                    f"order {ticket.order.number}; it is being paid out."
                )
            elif answer == "approve":
                text = f"Approved the refund on order {ticket.order.number}; it is being paid out."
            else:
                text = f"Rejected the refund on order {ticket.order.number}."
    except PermissionDenied as exc:
        return _decision_error(request, ticket, str(exc), status=403)
    except (services.AlreadyDecided, services.ClaimTaken) as exc:
        return _decision_error(request, ticket, str(exc), status=409)
    except services.RefundError as exc:
        return _decision_error(request, ticket, str(exc), status=400)
    if request.htmx.target == TICKET_STATUS:
        response = _ticket_status(request, ticket, flash=text)
    elif request.htmx:
        response = render(request, "reviews/_decided_row.html", {"ticket": ticket, "text": text})
    else:
        messages.success(request, text)
        return _back(request, ticket)
    return trigger_client_event(response, "queueChanged")


@require_POST
@login_required
def claim(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    """ "Assign to me" and "Unassign": two named buttons, one view."""
    ticket = get_object_or_404(
        permissions.visible(request.user).select_related("order", "claimed_by"), pk=ticket_id
    )
    try:
        if "unclaim" in request.POST:
            services.review_unclaim(ticket=ticket, by=request.user)
            text = f"Put the review of order {ticket.order.number} back in the queue."
        else:
            services.review_claim(ticket=ticket, by=request.user)
            text = f"You have the review of order {ticket.order.number}; others see it is yours."
    except PermissionDenied as exc:
        return _decision_error(request, ticket, str(exc), status=403)
    except services.ClaimTaken as exc:
        return _decision_error(request, ticket, str(exc), status=409)
    except services.RefundError as exc:
        return _decision_error(request, ticket, str(exc), status=400)
    ticket = Ticket.objects.select_related("order", "claimed_by").get(pk=ticket.pk)
    if request.htmx.target == TICKET_STATUS:
        response = _ticket_status(request, ticket, flash=text)
    elif request.htmx:
        context = {"ticket": _with_pending_decisions([ticket])[0], "may_decide": True}
        context |= _row_extras()
        response = render(request, "reviews/_review_row.html", context)
    else:
        messages.success(request, text)
        return _back(request, ticket)
    return trigger_client_event(response, "queueChanged")


def _row_extras() -> dict:
    return {
        "canned": list(CannedReason.objects.filter(active=True)),
        "warn_after": timedelta(minutes=settings.REFUNDS_REVIEW_WARN_MINUTES),
        "now": timezone.now(),
    }


@require_POST
@login_required
def bulk_approve(request: HtmxHttpRequest) -> HttpResponse:
    """Approve the reviews ticked in the queue: each one its own checked, audited decision."""
    form = forms.BulkForm(request.POST)
    picks = form.cleaned_data["pick"] if form.is_valid() else []
    if not picks:
        results = [{"ok": False, "text": "Tick the reviews to approve first."}]
    else:
        results = services.reviews_approve_bulk(picks=picks, by=request.user)
    if request.htmx:
        response = render(request, "reviews/_bulk_results.html", {"results": results})
        return trigger_client_event(response, "queueChanged")
    for result in results:
        where = f"Order {result['order']}: " if result.get("order") else ""
        (messages.success if result["ok"] else messages.error)(request, where + result["text"])
    return redirect("reviews:queue")


def _decision_error(request: HtmxHttpRequest, ticket: Ticket, text: str, *, status: int):
    if request.htmx.target == TICKET_STATUS:
        return _ticket_status(request, ticket, error=text, status=status)
    if request.htmx:
        ticket = Ticket.objects.select_related("order", "claimed_by").get(pk=ticket.pk)
        context = {
            "ticket": _with_pending_decisions([ticket])[0],
            "error": text,
            "may_decide": not permissions.decision_refusal(request.user, ticket),
        } | _row_extras()
        response = render(request, "reviews/_decision_error.html", context, status=status)
        # Swapped although it is a 4xx: base.html's htmx-config lets 400/403/409 through. The
        # message also goes to #messages, since the queue's next poll replaces the row.
        response["HX-Retarget"] = f"#review-{ticket.pk}"
        response["HX-Reswap"] = "outerHTML"
        return response
    if status == 403:
        raise PermissionDenied(text)  # templates/403.html says it in words
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
    refusal = permissions.decision_refusal(request.user, ticket)
    return {
        "ticket": _with_pending_decisions([ticket])[0],
        "decisions": ticket.decisions.select_related("reviewer"),
        "charges": ticket.charges.all(),
        "emails": ticket.emails.all(),
        "may_decide": not refusal,
        "refusal": refusal,
        "may_edit": not permissions.edit_refusal(request.user, ticket),
        "may_escalate": not permissions.escalation_refusal(request.user, ticket),
        "earlier": selectors.earlier_tickets(ticket),
        "is_admin": permissions.is_admin(request.user),
        "timeline": ticket.audit_events.select_related("actor"),
        "canned": list(CannedReason.objects.filter(active=True)),
    }


def _ticket_status(
    request: HtmxHttpRequest, ticket: Ticket, *, status: int = 200, **extra
) -> HttpResponse:
    ticket = Ticket.objects.select_related("order", "opened_by", "claimed_by").get(pk=ticket.pk)
    context = _ticket_context(request, ticket) | extra
    if status == 200 and (ticket.is_final or ticket.status == Ticket.Status.FAILED):
        status = HttpResponseStopPolling.status_code  # nothing left to wait for
    return render(request, "reviews/_ticket_status.html", context, status=status)


@require_GET
@login_required
@vary_on_headers("HX-Request", "HX-Target")
def ticket_detail(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    ticket = get_object_or_404(
        permissions.visible(request.user).select_related("order", "opened_by", "claimed_by"),
        pk=ticket_id,
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


@require_GET
@login_required
@vary_on_headers("HX-Request", "HX-Target")
def tickets(request: HtmxHttpRequest) -> HttpResponse:
    """Every ticket the user may read: search, filters, sort, pages. Counted up to a cap and
    paged by offset on indexed orders, so a page costs the same at 100,000 tickets."""
    search = forms.TicketSearch(request.GET or None)
    wanted = search.cleaned_data if search.is_valid() else {}
    now = timezone.now()
    after = before = None
    age = wanted.get("age", "")
    if age in forms.AGES:
        after = now - timedelta(hours=forms.AGES[age])
    elif age == "older":
        before = now - timedelta(days=30)
    found = selectors.ticket_search(
        permissions.visible(request.user),
        user=request.user,
        q=wanted.get("q", ""),
        status=wanted.get("status", ""),
        role=wanted.get("role", ""),
        opened_after=after,
        opened_before=before,
        min_cents=wanted.get("min_amount"),
        max_cents=wanted.get("max_amount"),
        mine=wanted.get("mine", False),
        decided=wanted.get("decided", False),
        order_by=forms.SORTS.get(wanted.get("sort") or "newest", ("-id",)),
    )
    total = found[: COUNT_CAP + 1].count()
    pages = max((min(total, COUNT_CAP) + TICKETS_PAGE - 1) // TICKETS_PAGE, 1)
    page = min(_page_number(request), pages)
    rows = list(
        found.select_related("order", "opened_by", "claimed_by")[
            (page - 1) * TICKETS_PAGE : page * TICKETS_PAGE
        ]
    )
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "search": search,
        "rows": rows,
        "total": total,
        "count_cap": COUNT_CAP,
        "page": page,
        "pages": pages,
        "query": query.urlencode(),
        "now": now,
    }
    template = "reviews/_tickets_results.html" if request.htmx else "reviews/tickets.html"
    return render(request, template, context)


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
    total = events[: COUNT_CAP + 1].count()  # capped: the trail only grows
    pages = max((min(total, COUNT_CAP) + AUDIT_PAGE - 1) // AUDIT_PAGE, 1)
    page = min(_page_number(request), pages)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "search": search,
        "events": list(events[(page - 1) * AUDIT_PAGE : page * AUDIT_PAGE]),
        "total": total,
        "count_cap": COUNT_CAP,
        "page": page,
        "pages": pages,
        "query": query.urlencode(),
    }
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
                    e.ticket.order.number,
                    e.get_action_display(),
                    e.actor.username if e.actor else "the desk",
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
    # A cell starting with = + - @ is a formula to a spreadsheet: quote it as text.
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text
