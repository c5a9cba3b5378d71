"""Small response headers Django has no setting for, and the answer to a database blip."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils.deprecation import MiddlewareMixin

log = logging.getLogger(__name__)
# A dropped or unreachable database (or SQLite's "locked"): try again. Bugs stay 500.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)


def permissions_policy_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    """The desk uses no camera, microphone, location, payment or USB: no page may ask for them."""
    header = settings.PERMISSIONS_POLICY

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response.setdefault("Permissions-Policy", header)
        return response

    return middleware


def reviewer_time_zone_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    """Times in the reviewer's own time zone, as their browser names it (the `tz` cookie)."""
    from zoneinfo import ZoneInfo, available_timezones

    from django.utils import timezone

    known = available_timezones()

    def middleware(request: HttpRequest) -> HttpResponse:
        name = request.COOKIES.get("tz", "")
        if name in known:
            timezone.activate(ZoneInfo(name))
        try:
            return get_response(request)
        finally:  # the zone is this request's: what runs next in the thread has its own
            timezone.deactivate()

    return middleware


class DatabaseUnavailableMiddleware(MiddlewareMixin):
    """A lost database connection answers 503 with Retry-After, not 500: its transaction is
    rolled back, so nothing changed and the client may repeat the request. The page is rendered
    without the request: its context processors would read the lost database."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, DATABASE_UNAVAILABLE):
            return None
        log.warning(
            "%s %s: the database is unavailable (%s: %s); answered 503",
            request.method,
            request.path,
            type(exception).__name__,
            str(exception).strip()[:200],
        )
        retry_after = settings.DATABASE_RETRY_AFTER_SECONDS
        page = render_to_string("503.html", {"retry_after": retry_after})
        return HttpResponse(page, status=503, headers={"Retry-After": str(retry_after)})
