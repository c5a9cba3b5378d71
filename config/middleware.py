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
