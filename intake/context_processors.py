"""The nav's count of messages waiting to be sorted, on every page a desk user sees."""

from __future__ import annotations

from functools import cache

from django.http import HttpRequest

from intake import selectors
from refunds import permissions


def needs_sorting(request: HttpRequest) -> dict[str, object]:
    user = getattr(request, "user", None)
    if user is None or not permissions.is_desk_user(user):
        return {"may_sort": False}
    # Counted where a template shows it (a template calls a callable), once a rendering: an htmx
    # answer (a poll's cards, a claim) shows no nav and reads nothing for it.
    count = cache(selectors.needs_sorting_count)
    return {"may_sort": True, "needs_sorting": count, "needs_sorting_cap": selectors.COUNT_CAP}
