"""Per-user API rate limit; the per-address one runs before authentication (api.errors), so bad
tokens are counted too."""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from api import limits


class PerTokenThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return True  # refused by authentication anyway; the address limit counted it
        verdict = limits.hit(
            f"user:{request.user.pk}", limits.Rate.parse(settings.API_RATE_PER_TOKEN)
        )
        self._wait = verdict.retry_after
        return verdict.allowed

    def wait(self) -> float:
        return self._wait
