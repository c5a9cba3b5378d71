"""Login throttling on top of django-axes' lock per (user name, address): failed logins are also
counted per address (LOGIN_FAILURES_PER_IP), so one address cannot try any number of names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from api import limits
from core.addresses import client_address


def _key(request: HttpRequest) -> str:
    return f"login-fail-ip:{client_address(request)}"


def _rate() -> limits.Rate:
    return limits.Rate.parse(settings.LOGIN_FAILURES_PER_IP)


@receiver(user_login_failed)
def count_failure(sender: Any, credentials: dict, request: HttpRequest | None = None, **_) -> None:
    if request is not None:
        limits.hit(_key(request), _rate())


def _too_many(request: HttpRequest, retry_after: int) -> HttpResponse:
    context = {"per_address": True, "retry_minutes": max(1, -(-retry_after // 60))}
    response = render(request, "registration/locked.html", context, status=429)
    response["Retry-After"] = str(retry_after)
    return response


def login_guard_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    login_paths: set[str] = set()

    def middleware(request: HttpRequest) -> HttpResponse:
        if not login_paths:
            login_paths.update({reverse("login"), reverse("admin:login")})
        if request.method == "POST" and request.path in login_paths:
            verdict = limits.peek(_key(request), _rate())
            if not verdict.allowed:
                return _too_many(request, verdict.retry_after)
        return get_response(request)

    return middleware


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """django-axes' answer to a locked (user name, address) pair: 429 with Retry-After."""
    return _too_many(request, max(1, int(settings.AXES_COOLOFF_TIME.total_seconds())))
