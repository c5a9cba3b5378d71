"""Small response headers Django has no setting for."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


def permissions_policy_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    """Permissions-Policy: the desk uses no camera, microphone, location, payment or USB, so
    no page (nor anything injected into one) may ask for them."""

    header = settings.PERMISSIONS_POLICY

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response.setdefault("Permissions-Policy", header)
        return response

    return middleware


def reviewer_time_zone_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    """Times on the desk's pages in the reviewer's own time zone: their browser names it in the
    `tz` cookie (static/desk.js); an unknown or missing name leaves settings.TIME_ZONE."""
    from zoneinfo import ZoneInfo, available_timezones

    from django.utils import timezone

    known = available_timezones()

    def middleware(request: HttpRequest) -> HttpResponse:
        name = request.COOKIES.get("tz", "")
        if name in known:
            timezone.activate(ZoneInfo(name))
        else:
            timezone.deactivate()
        return get_response(request)

    return middleware
