"""The desk's own page for a page that is not there (or not the reviewer's to see)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

# Not the desk's pages: the API answers its own JSON errors, the admin has its own pages.
NOT_DESK = ("/api/", "/admin/", "/static/", "/metrics", "/healthz", "/readyz")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404. Says the same for a page that does not exist and a ticket outside the
    reviewer's scope: telling them apart would tell who may see what."""
    return render(request, "404.html", status=404)


def desk_not_found_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    """Under DEBUG (the demo) Django answers a 404 with its technical page, 980 px wide on a
    phone and full of the URL table; a link from team chat to a ticket outside the reviewer's
    scope lands there. The desk's pages get templates/404.html in every mode."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if response.status_code == 404 and settings.DEBUG and not request.path.startswith(NOT_DESK):
            return not_found(request)
        return response

    return middleware
