"""Django's Paginator over a count that stops at a cap, for the desk's long lists: a page costs the
same at 100,000 rows."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property


class CappedPaginator(Paginator):
    """Django's Paginator whose pages stop at `cap` rows; `total` says whether there are more."""

    def __init__(self, rows: QuerySet, per_page: int, *, cap: int) -> None:
        super().__init__(rows, per_page)
        self.rows = rows
        self.cap = cap

    @cached_property
    def total(self) -> int:
        """How many rows there are, up to cap + 1: on the key alone in the rows' own (indexed)
        order, so the planner reads cap + 1 index entries and stops."""
        return self.rows.values("pk")[: self.cap + 1].count()

    @cached_property
    def count(self) -> int:
        return min(self.total, self.cap)


def page_number(request: HttpRequest) -> int:
    """The `page` asked for; anything else is the first (get_page would send 0 to the last)."""
    raw = request.GET.get("page", "1")
    return max(int(raw), 1) if raw.isdigit() and len(raw) < 7 else 1


def capped_page(request: HttpRequest, rows: QuerySet, *, size: int, cap: int) -> Page:
    """The requested page of `rows`; a page past the last shows the last."""
    return CappedPaginator(rows, size, cap=cap).get_page(page_number(request))


def page_context(request: HttpRequest, page: Page) -> dict[str, Any]:
    """What the pager shows, with the query string without `page` for its links."""
    paginator = page.paginator
    assert isinstance(paginator, CappedPaginator)
    query = request.GET.copy()
    query.pop("page", None)
    return {
        "total": paginator.total,
        "count_cap": paginator.cap,
        "page": page.number,
        "pages": paginator.num_pages,
        "query": query.urlencode(),
    }
