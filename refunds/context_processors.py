"""What every page of the desk shows, whoever renders it."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def fakes_banner(request: HttpRequest) -> dict[str, list[str]]:
    """Nobody mistakes a staging box whose mail is never sent for the desk customers hear from."""
    return {"fakes_banner": settings.REFUNDS_FAKES_BANNER}
