"""One capped paginator for the desk's long lists (queue, tickets, audit): the page number from
the query, a count that stops at a cap, one slice, the page count. A page costs the same at
100,000 rows: nothing counts past the cap, and the slice is an OFFSET on an indexed order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest


@dataclass(frozen=True)
class Page:
    rows: list[Any]
    total: int  # up to cap + 1: more than `cap` reads as "more than cap"
    cap: int
    number: int
    pages: int
    query: str  # the request's query string without `page`, for the page links

    def context(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "count_cap": self.cap,
            "page": self.number,
            "pages": self.pages,
            "query": self.query,
        }


def page_number(request: HttpRequest) -> int:
    """The `page` asked for; anything that is not a sensible number is the first."""
    raw = request.GET.get("page", "1")
    return max(int(raw), 1) if raw.isdigit() and len(raw) < 7 else 1


def capped_count(rows: QuerySet, *, cap: int) -> int:
    """How many `rows` there are, counting no further than cap + 1. Counted in the rows' own
    order, which an index gives: the planner reads cap + 1 entries of it and stops."""
    return rows[: cap + 1].count()


def page_of(request: HttpRequest, total: int, *, size: int, cap: int) -> tuple[int, int]:
    """The page number to show of `total` rows counted up to `cap`, and the number of pages."""
    pages = max((min(total, cap) + size - 1) // size, 1)
    return min(page_number(request), pages), pages


def capped_page(request: HttpRequest, rows: QuerySet, *, size: int, cap: int) -> Page:
    """The requested page of `rows` (already filtered and ordered), `size` to a page; a page
    past the last shows the last."""
    total = capped_count(rows, cap=cap)
    number, pages = page_of(request, total, size=size, cap=cap)
    query = request.GET.copy()
    query.pop("page", None)
    return Page(
        rows=list(rows[(number - 1) * size : number * size]),
        total=total,
        cap=cap,
        number=number,
        pages=pages,
        query=query.urlencode(),
    )
