"""The user's own API token: made here, shown once."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from api.models import ApiToken
from reviews.views.common import AuthenticatedRequest


@require_http_methods(["GET", "POST"])
@login_required
def api_token(request: AuthenticatedRequest) -> HttpResponse:
    """Make (or replace) the user's API key, shown once: only its hash is stored."""
    token = ApiToken.objects.filter(user=request.user).first()
    key = ""
    if request.method == "POST":
        token, key = ApiToken.issue(request.user)
    response = render(request, "reviews/api_token.html", {"token": token, "key": key})
    response["Cache-Control"] = "no-store"  # the key must not stay in a cache
    return response
