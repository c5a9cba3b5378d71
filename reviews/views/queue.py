"""The review queue: the reviews waiting on this reviewer, claim, decide, bulk approve."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from refunds import permissions, policy, selectors, services
from refunds.flow.words import numbers_words
from refunds.models import Decision, Ticket, user_roles
from reviews import forms, paging
from reviews.views.common import (
    COUNT_CAP,
    ORDER_LINKS,
    QUEUE_PAGE,
    RECENT,
    TICKET_STATUS,
    HtmxHttpRequest,
    back,
    form_errors,
    pressed,
    row_extras,
    with_pending_decisions,
)
from reviews.views.ticket import ticket_status_fragment

QUEUE_ORDER = ("review_since", "id")  # oldest first, as ticket_queue_cover_idx reads them


def _covering(request: HtmxHttpRequest) -> bool:
    return request.GET.get("cover") == "1" and permissions.is_manager(request.user)


def _queue_context(request: HtmxHttpRequest, version: QueueVersion) -> dict:
    cover = _covering(request)
    # The reviews the version just read, still filtered: one that left since waits for a poll.
    rows = (
        permissions.reviewable(request.user, cover=cover)
        .filter(pk__in=version.pks)
        .select_related("order", "claimed_by", "opened_by")
        .prefetch_related(ORDER_LINKS)
        .order_by(*QUEUE_ORDER)
    )
    # Escalations first on the page (then the longest wait): a manager takes those before the rest.
    cards = sorted(rows, key=lambda t: not t.is_escalated) if version.pks else []
    reviews = _with_decided_lines(with_pending_decisions(cards), version.number, version.decided)
    return {
        "reviews": reviews,
        "review_count": version.total,
        "count_cap": COUNT_CAP,
        "page": version.number,
        "pages": version.pages,
        "cover": cover,
        "may_cover": permissions.is_manager(request.user)
        and not permissions.is_agent(request.user),
        "version": version.digest,
        "roles": sorted(user_roles(request.user)),
        "scope": policy.scope_sentence(
            agent=permissions.is_agent(request.user),
            manager=permissions.is_manager(request.user),
            admin=permissions.is_admin(request.user),
        ),
    } | row_extras()


# A decided review's line stays a poll or two: a reviewer on a phone sees it where they tapped.
DECIDED_SHOWN = timedelta(seconds=8)


def decided_line(decision: Decision, ticket: Ticket) -> str:
    """The short line that takes a decided review's place in the queue."""
    orders = decision.orders or {}
    on = numbers_words(list(orders) or [ticket.order.number])
    if decision.refused_reason:
        return f"Your decision on {on} was not applied: {decision.refused_reason}"
    if decision.answer == Decision.Answer.ASK:
        return f"Asked the customer about {on}; the review comes back with their reply"
    paid = {n: o for n, o in orders.items() if o["answer"] == "approve"}
    if not paid:
        return f"Rejected the refund for {on} — the customer is told why"
    # What the review proposed for them, while the caller's copy still shows it.
    proposed = {str(o["number"]): o["amount_cents"] for o in services.review_orders(ticket)}
    return policy.paid_out_words(
        sum(o["amount_cents"] for o in paid.values()),
        list(paid),
        asked_cents=sum(proposed[n] for n in paid) if set(paid) <= set(proposed) else None,
        rejected=[n for n in orders if n not in paid],
        undo_seconds=decision.undo_seconds_left(),
    )


def _with_decided_lines(reviews: list[Ticket], page: int, decided: list[Decision]) -> list[Ticket]:
    """The page's rows, with the reviews this reviewer decided moments ago as one-line outcomes
    in their places (put back by age once a worker took them out of the queue)."""
    since = timezone.now() - DECIDED_SHOWN
    recent = {d.ticket_id: d for d in decided}
    if not recent:
        return reviews
    now = timezone.now()
    for decision in recent.values():  # Undo stays beside it while its grace runs
        decision.ticket.undo_decision = (
            decision if decision.apply_after and decision.apply_after > now else None
        )
    for ticket in reviews:
        if ticket.pk in recent and recent[ticket.pk].interrupt_id != ticket.pending_interrupt_id:
            # Back with a new review already (the customer answered a question): shown live.
            recent.pop(ticket.pk)
        elif ticket.pk in recent:
            ticket.undo_decision = recent[ticket.pk].ticket.undo_decision
            ticket.decided_line = decided_line(recent.pop(ticket.pk), ticket)
    if recent and page == 1:
        last = (reviews[-1].review_since or since, reviews[-1].pk) if reviews else None
        for decision in recent.values():
            ticket = decision.ticket
            if ticket.review_since and (last is None or (ticket.review_since, ticket.pk) < last):
                ticket.decided_line = decided_line(decision, ticket)
                reviews.append(ticket)
        reviews.sort(key=lambda t: (t.review_since or since, t.pk))
    return reviews


# What a waiting row can change (all in ticket_queue_cover_idx: the version reads no row); the
# amount and the escalation's note are written only with the interrupt and escalated_for.
VERSION_COLUMNS = (
    "pk",
    "status",
    "pending_interrupt_id",
    "claimed_by_id",
    "claim_expires_at",
    "escalated_for",
    "review_since",
    "required_role",
)


@dataclass(frozen=True)
class QueueVersion:
    """The version, and what it read that the page shows too."""

    digest: str
    total: int  # the reviews waiting, counted up to COUNT_CAP + 1
    number: int  # the page shown, and how many there are
    pages: int
    pks: tuple[int, ...]  # the page's reviews, oldest first
    decided: list[Decision]  # this reviewer's decisions of the last seconds, with their tickets


def queue_version(request: HtmxHttpRequest) -> QueueVersion:
    """What the rows show (the clock's changes too), as a digest of indexed columns: a poll with
    the same one gets a 204 and keeps the reviewer's half-typed reason. Read before the rows, so
    a change in between shows at the next poll instead of hiding under this version."""
    user = request.user
    now = timezone.now()
    reviewable = permissions.reviewable(user, cover=_covering(request)).order_by(*QUEUE_ORDER)
    answered = Decision.objects.filter(interrupt_id=OuterRef("pending_interrupt_id"))
    rows = reviewable.annotate(decision=Subquery(answered.values("pk")[:1])).values_list(
        *VERSION_COLUMNS, "decision"
    )
    page = paging.capped_page(request, rows, size=QUEUE_PAGE, cap=COUNT_CAP)
    paginator = page.paginator
    assert isinstance(paginator, paging.CappedPaginator)
    total, number, pages = paginator.total, page.number, paginator.num_pages
    mine = Decision.objects.filter(reviewer_id=user.pk, decided_at__gte=now - DECIDED_SHOWN)
    warn = timedelta(minutes=settings.REFUNDS_REVIEW_WARN_MINUTES)
    parts: list[object] = [total, number, pages]
    pks = []
    for row in page:
        claim_expires_at, review_since = row[4], row[6]
        live = bool(row[3] and claim_expires_at and claim_expires_at > now)
        late = bool(review_since and now - review_since > warn)
        parts.append((*row, live, late))
        pks.append(row[0])
    # In no SQL order: an ORDER BY id lets SQLite prefer reading every decision in id order.
    decided = list(mine.select_related("ticket__order").order_by())
    parts.extend(sorted((d.pk, d.ticket_id, d.refused_reason) for d in decided))
    digest = hashlib.sha1(repr(parts).encode()).hexdigest()[:16]
    return QueueVersion(digest, total, number, pages, tuple(pks), decided)


@require_GET
@login_required
@vary_on_headers("HX-Request", "HX-Target")
def queue(request: HtmxHttpRequest) -> HttpResponse:
    """The review queue page; its regions poll this same URL for their fragments."""
    version = queue_version(request)
    if request.htmx.target == "queue-rows" and request.GET.get("v") == version.digest:
        return HttpResponse(status=204)
    context = _queue_context(request, version)
    if request.htmx.target == "queue-rows":
        response = render(request, "reviews/queue.html#rows", context)
        # The recent tickets refresh too: never a queued review beside its ticket "Running".
        return trigger_client_event(response, "ticketsChanged")
    context |= _recent_context(request)
    if request.htmx.target == "recent-tickets":
        return render(request, "reviews/queue.html#recent-tickets", context)
    return render(request, "reviews/queue.html", context)


def _recent_context(request: HtmxHttpRequest) -> dict:
    """The tickets the user opened lately, with where each refunded one's money is."""
    recent = list(
        permissions.visible(request.user)
        .filter(opened_by=request.user)
        .select_related("order")
        .prefetch_related(ORDER_LINKS)[:RECENT]
    )
    return {"recent": recent, "recent_refunds": selectors.refund_progress_of(recent)}


@require_POST
@login_required
def decide(request: HtmxHttpRequest, ticket_id: int) -> HttpResponse:
    """Approve, Reject, Escalate, Ask: named buttons of one form, in a queue row or a ticket."""
    ticket = get_object_or_404(
        permissions.visible(request.user).select_related("order", "claimed_by"), pk=ticket_id
    )
    form = forms.DecideForm(request.POST)
    answer = pressed(request.POST, ("approve", "reject", "escalate", "orders", "ask"))
    try:
        if not form.is_valid():
            raise services.RefundError(form_errors(form))
        data = form.cleaned_data
        if answer == "both":
            raise services.RefundError("Choose either approve or reject, not both.")
        said = {"ticket": ticket, "interrupt_id": data["interrupt_id"], "note": data["note"]}
        if answer == "escalate":
            services.ticket_escalate(ticket=ticket, by=request.user, note=data["note"])
            text = f"Escalated the review of order {ticket.order.number} to managers."
        elif answer == "ask":
            question = {"question": data["question"], "canned": data["canned_question"]}
            decision = services.ticket_ask(**said, **question, reviewer=request.user)
            text = decided_line(decision, ticket)
        else:
            orders = forms.review_answers(request.POST, ticket, answer, data)
            decision = services.ticket_decide(**said, orders=orders, reviewer=request.user)
            text = decided_line(decision, ticket)
    except (PermissionDenied, services.RefundError) as exc:
        return decision_error(request, ticket, str(exc), status=refusal_status(exc))
    undo = decision if answer != "escalate" and decision.apply_after else None
    context = {"ticket": ticket, "text": text, "line": text, "undo": undo}
    return answered(request, ticket, text, "reviews/queue.html#decided-row", context)


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
    except (PermissionDenied, services.RefundError) as exc:
        return decision_error(request, ticket, str(exc), status=refusal_status(exc))
    ticket = Ticket.objects.select_related("order", "claimed_by").get(pk=ticket.pk)
    context = {"ticket": with_pending_decisions([ticket])[0], "may_decide": True} | row_extras()
    return answered(request, ticket, text, "reviews/queue.html#review-row", context)


def answered(request: HtmxHttpRequest, ticket: Ticket, text: str, row: str, context: dict):
    """A review action's answer: the region htmx targets, or (no JS) a flash and the way back."""
    if request.htmx.target == TICKET_STATUS:
        response = ticket_status_fragment(request, ticket, flash=text)
    elif request.htmx:
        response = render(request, row, context)
    else:
        messages.success(request, text)
        return back(request, ticket)
    return trigger_client_event(response, "queueChanged")


def refusal_status(exc: Exception) -> int:
    """403: not theirs to do; 409: a colleague or a worker was first; 400: anything else."""
    if isinstance(exc, PermissionDenied):
        return 403
    return 409 if isinstance(exc, services.AlreadyDecided | services.ClaimTaken) else 400


@require_POST
@login_required
def bulk_approve(request: HtmxHttpRequest) -> HttpResponse:
    """Approve the reviews ticked in the queue: each one its own checked, audited decision."""
    form = forms.BulkForm(request.POST)
    picks = form.cleaned_data["pick"] if form.is_valid() else []
    if not picks:
        results: list[dict[str, Any]] = [
            {"ok": False, "text": "Tick the reviews to approve first."}
        ]
    else:
        results = services.reviews_approve_bulk(picks=picks, by=request.user)
    if request.htmx:
        response = render(request, "reviews/queue.html#bulk-results", {"results": results})
        return trigger_client_event(response, "queueChanged")
    for result in results:
        label = "Orders" if "," in result.get("order", "") else "Order"
        where = f"{label} {result['order']}: " if result.get("order") else ""
        (messages.success if result["ok"] else messages.error)(request, where + result["text"])
    return redirect("reviews:queue")


@require_POST
@login_required
def undo(request: HtmxHttpRequest, decision_id: int) -> HttpResponse:
    """Undo beside a decision's confirmation, within its grace (services.decision_undo)."""
    try:
        decision = services.decision_undo(decision_id=decision_id, by=request.user)
    except services.RefundError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"Undone: the review of order {decision.ticket.order.number} is back in the queue.",
        )
        return back(request, decision.ticket)
    return redirect("reviews:queue")


def decision_error(request: HtmxHttpRequest, ticket: Ticket, text: str, *, status: int):
    if request.htmx.target == TICKET_STATUS:
        return ticket_status_fragment(request, ticket, error=text, status=status)
    if request.htmx:
        ticket = Ticket.objects.select_related("order", "claimed_by").get(pk=ticket.pk)
        context = {
            "ticket": with_pending_decisions([ticket])[0],
            "error": text,
            "may_decide": not permissions.decision_refusal(request.user, ticket),
            # Lost to a colleague: the banner follows the review until it ends.
            "follow": ticket.pending_interrupt_id if status == 409 else "",
        } | row_extras()
        response = render(request, "reviews/queue.html#decision-error", context, status=status)
        # Swapped although it is a 4xx: base.html's htmx-config lets 400/403/409 through. The
        # message also goes to #messages, since the queue's next poll replaces the row.
        response["HX-Retarget"] = f"#review-{ticket.pk}"
        response["HX-Reswap"] = "outerHTML"
        return response
    if status == 403:
        raise PermissionDenied(text)  # templates/403.html says it in words
    # The flash names the order the page is about, unless the refusal already does.
    named = f"Order {ticket.order.number}"
    messages.error(request, text if text.startswith(named) else f"{named}: {text}")
    return back(request, ticket)
