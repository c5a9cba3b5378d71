"""The tickets page: search, filters, sorts, capped pages."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from refunds import permissions, selectors
from reviews import forms, paging
from reviews.views.common import COUNT_CAP, ORDER_LINKS, TICKETS_PAGE, HtmxHttpRequest


@require_GET
@login_required
@vary_on_headers("HX-Request", "HX-Target")
def tickets(request: HtmxHttpRequest) -> HttpResponse:
    """Every ticket the user may read: search, filters, sort, capped pages."""
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
        order_by=forms.SORTS[wanted.get("sort") or "newest"][1],
    )
    page = paging.capped_page(
        request,
        found.select_related("order", "opened_by", "claimed_by").prefetch_related(ORDER_LINKS),
        size=TICKETS_PAGE,
        cap=COUNT_CAP,
    )
    context = {
        "search": search,
        "rows": page,
        "refunds": selectors.refund_progress_of(page),
        "now": now,
        **paging.page_context(request, page),
    }
    template = "reviews/tickets.html#results" if request.htmx else "reviews/tickets.html"
    return render(request, template, context)
