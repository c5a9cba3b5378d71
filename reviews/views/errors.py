"""The desk's own page for a page that is not there (or not the reviewer's to see)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

# Not the desk's pages: the API answers its own JSON errors, the admin has its own pages.
NOT_DESK = ("/api/", "/admin/", "/static/", "/metrics", "/healthz", "/readyz")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404, also for a ticket outside the reviewer's scope: else it tells who sees what."""
    return render(request, "404.html", status=404)


def desk_not_found_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    """The desk's 404 page under DEBUG (the demo) too: Django's technical page lists every URL."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        if response.status_code == 404 and settings.DEBUG and not request.path.startswith(NOT_DESK):
            return not_found(request)
        return response

    return middleware
