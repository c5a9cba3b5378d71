"""The review queue: the reviews waiting on this reviewer, claim, decide, bulk approve."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from refunds import permissions, policy, selectors, services
from refunds.flow.words import numbers_words
from refunds.models import Decision, Ticket, user_roles
from reviews import forms, paging, rows
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


def _queue_context(request: HtmxHttpRequest, version: QueueVersion, cards: list[Card]) -> dict:
    """What the page shows of `cards` (all of the version's, or a poll's changed ones)."""
    cover = _covering(request)
    live = [c.pk for c in cards if c.pk not in version.decided]
    # Still filtered: a review that left since the version was read waits for the next poll.
    waiting = (
        permissions.reviewable(request.user, cover=cover)
        .filter(pk__in=live)
        .select_related("order", "claimed_by", "opened_by")
        .prefetch_related(ORDER_LINKS)
        if live
        else []
    )
    tickets = {t.pk: t for t in with_pending_decisions(list(waiting))}
    now = timezone.now()
    reviews = []
    for card in cards:
        decision = version.decided.get(card.pk)
        ticket = decision.ticket if decision is not None else tickets.get(card.pk)
        if ticket is None:
            continue
        ticket.card_key = card.version
        if decision is not None:  # Undo stays beside it while its grace runs
            ticket.undo_decision = (
                decision if decision.apply_after and decision.apply_after > now else None
            )
            ticket.decided_line = decided_line(decision, ticket)
        reviews.append(ticket)
    return {
        "reviews": reviews,
        "card_count": len(version.cards),
        "review_count": version.total,
        "count_cap": COUNT_CAP,
        "page": version.number,
        "pages": version.pages,
        "cover": cover,
        "may_cover": permissions.is_manager(request.user)
        and not permissions.is_agent(request.user),
        "clock": version.clock,
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


# What a waiting row is read by (all in ticket_queue_cover_idx: the version reads no row).
VERSION_COLUMNS = (
    "pk",
    "pending_interrupt_id",
    "claimed_by_id",
    "claim_expires_at",
    "escalated_for",
    "review_since",
    "card_version",
)


@dataclass(frozen=True)
class Card:
    """A card the queue shows, and its version: the ticket's card_version (migration 0047) and
    what the clock alone changes. Decided lines are versioned by their decision."""

    pk: int
    version: str


@dataclass(frozen=True)
class QueueVersion:
    """The cards the page shows, in order, and what the next poll sends back."""

    # "<change clock>.<until>": unchanged while the clock is and the time is before `until` (a
    # claim lapsing, a review turning overdue; none: ""); "": the next poll reads the rows.
    clock: str
    total: int  # the reviews waiting, counted up to COUNT_CAP + 1
    number: int  # the page shown, and how many there are
    pages: int
    cards: tuple[Card, ...]  # escalations first, then the longest waiting
    decided: dict[int, Decision]  # the reviewer's decisions of the last seconds, by ticket


def queue_version(request: HtmxHttpRequest, clock: int | None = None) -> QueueVersion:
    """The page's cards and their versions, from indexed columns. The change clock is read
    first (or given: the poll's gate read it), so a change in between shows at the next poll
    instead of hiding under this version."""
    user = request.user
    now = timezone.now()
    clock = selectors.queue_clock() if clock is None else clock
    turns = []  # when a card changes with the time alone
    reviewable = permissions.reviewable(user, cover=_covering(request)).order_by(*QUEUE_ORDER)
    page = paging.capped_page(
        request, reviewable.values_list(*VERSION_COLUMNS), size=QUEUE_PAGE, cap=COUNT_CAP
    )
    paginator = page.paginator
    assert isinstance(paginator, paging.CappedPaginator)
    warn = timedelta(minutes=settings.REFUNDS_REVIEW_WARN_MINUTES)
    # In no SQL order: an ORDER BY id lets SQLite prefer reading every decision in id order.
    mine = Decision.objects.filter(reviewer_id=user.pk, decided_at__gte=now - DECIDED_SHOWN)
    recent = {d.ticket_id: d for d in mine.select_related("ticket__order").order_by()}
    decided: dict[int, Decision] = {}
    placed = []  # (escalations first, waiting since, pk), card
    for pk, interrupt, claimed, claim_ends, escalated_for, since, card_version in page:
        decision = recent.pop(pk, None)
        # Back with a new review already (the customer answered a question): shown live.
        if decision is not None and decision.interrupt_id == interrupt:
            decided[pk] = decision
            version = f"d{decision.pk}.{card_version}"
        else:
            if claimed and claim_ends and claim_ends > now:
                turns.append(claim_ends)
            if since and since + warn >= now:
                turns.append(since + warn)
            version = rows.card_key(
                card_version,
                claimed_by_id=claimed,
                claim_expires_at=claim_ends,
                review_since=since,
                now=now,
                warn_after=warn,
            )
        escalated = bool(escalated_for) and escalated_for == interrupt
        placed.append(((not escalated, since, pk), Card(pk, version)))
    if recent and page.number == 1:  # decided moments ago and gone from the queue: put back by age
        last = max((key[1:] for key, _ in placed), default=None)
        for pk, decision in recent.items():
            since = decision.ticket.review_since
            if since and (last is None or (since, pk) < last):
                decided[pk] = decision
                version = f"d{decision.pk}.{decision.ticket.card_version}"
                placed.append(((True, since, pk), Card(pk, version)))
    placed.sort(key=lambda entry: entry[0])
    until = str(math.ceil(min(turns).timestamp())) if turns else ""
    return QueueVersion(
        # Decided lines go with the time: every poll reads the rows while one is shown.
        clock="" if decided else f"{clock}.{until}",
        total=paginator.total,
        number=page.number,
        pages=paginator.num_pages,
        cards=tuple(card for _, card in placed),
        decided=decided,
    )


@dataclass(frozen=True)
class Changes:
    """What a poll swaps: the cards gone, and the changed or new ones with where each goes."""

    gone: list[int]
    cards: list[tuple[Card, str]]  # "" in place of the card shown, else after "#review-<pk>"


def changes(shown: list[Card], cards: tuple[Card, ...]) -> Changes:
    """The swaps that take the cards the client shows to `cards`: the longest run of cards
    still in their order keeps its places (each drawn again where it is if it changed); the
    rest are new or moved, drawn after the card before them (the first at the top)."""
    now = {card.pk for card in cards}
    before = {card.pk: (at, card.version) for at, card in enumerate(shown) if card.pk in now}
    at = [before[card.pk][0] if card.pk in before else -1 for card in cards]
    # The longest run of increasing places (a page is 25 cards: the quadratic way is plenty).
    run, back = [0] * len(cards), [-1] * len(cards)
    for i in range(len(cards)):
        if at[i] >= 0:
            run[i] = 1
            for j in range(i):
                if 0 <= at[j] < at[i] and run[j] + 1 > run[i]:
                    run[i], back[i] = run[j] + 1, j
    stay, i = set(), max(range(len(cards)), key=run.__getitem__, default=-1)
    while i >= 0 and run[i]:
        stay.add(i)
        i = back[i]
    gone = [card.pk for card in shown if card.pk not in now]
    swaps: list[tuple[Card, str]] = []
    for i, card in enumerate(cards):
        if i in stay:
            if before[card.pk][1] != card.version:
                swaps.append((card, ""))
            continue
        if at[i] >= 0:
            gone.append(card.pk)
        swaps.append((card, f"#review-{cards[i - 1].pk}" if i else "top"))
    return Changes(gone, swaps)


def shown_cards(value: str) -> list[Card]:
    """The client's cards, "pk:version" comma-separated, in the order it shows them (a version
    the client does not know is "": drawn again)."""
    cards = []
    for item in filter(None, value.split(",")):
        pk, _, version = item.partition(":")
        if not pk.isdigit():
            raise ValueError(item)
        cards.append(Card(int(pk), version))
    return cards


@require_GET
@login_required
@vary_on_headers("HX-Request", "HX-Target")
def queue(request: HtmxHttpRequest) -> HttpResponse:
    """The review queue page; its regions poll this same URL for their fragments."""
    if request.htmx.target == "recent-tickets":
        return render(request, "reviews/queue.html#recent-tickets", _recent_context(request))
    if request.htmx.target == QUEUE_POLL:
        return _poll(request)
    version = queue_version(request)
    context = _queue_context(request, version, list(version.cards)) | _recent_context(request)
    return render(request, "reviews/queue.html", context)


QUEUE_POLL = "queue-foot"  # the element that polls, and is drawn again by a changed poll


def _poll(request: HtmxHttpRequest) -> HttpResponse:
    """A poll: 204 while the change clock has not moved and no card turned with the time; else
    only the cards that changed, as out-of-band swaps, and the foot (counts, pager) with the new
    clock."""
    clock = selectors.queue_clock()
    seen, _, until = request.GET.get("clock", "").partition(".")
    if seen == str(clock) and (not until.isdigit() or timezone.now().timestamp() < int(until)):
        return HttpResponse(status=204)
    try:
        shown = shown_cards(request.GET.get("shown", ""))
    except ValueError:
        # 422, not 400: the page swaps a 400 in (base.html), and this one would take the poll away.
        return HttpResponse("shown: give the cards as id:version pairs.", status=422)
    version = queue_version(request, clock)
    swaps = changes(shown, version.cards)
    context = _queue_context(request, version, [card for card, _ in swaps.cards])
    where = {card.pk: place for card, place in swaps.cards}
    for ticket in context["reviews"]:
        ticket.place = where[ticket.pk]
    response = render(request, "reviews/queue.html#poll", context | {"gone": swaps.gone})
    # Cards drawn or gone: the recent tickets refresh at once (never a queued review beside its
    # ticket "Running") and the page polls at its fast pace again. The clock moved elsewhere
    # only: the page slows down as after a 204, and the recent tickets refresh now and then.
    moved = bool(swaps.cards or swaps.gone)
    return trigger_client_event(response, "ticketsChanged" if moved else "clockMoved")


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
