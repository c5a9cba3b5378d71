"""Who is calling: a per-user API key (`Authorization: Bearer <key>` or `Token <key>`), or the
browser session with its CSRF token. A key acts with its user's rights (refunds/permissions.py)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from api.models import ApiToken

SCHEMES = ("bearer", "token")


class TokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.headers.get("Authorization", "")
        if not header:
            return None  # the session may still say who it is
        scheme, _, key = header.strip().partition(" ")
        if scheme.lower() not in SCHEMES:
            raise exceptions.AuthenticationFailed(
                "Unknown authorization scheme: send 'Authorization: Bearer <key>' (or Token)."
            )
        token = ApiToken.find(key.strip())
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid API token.")
        return token.user, token

    def authenticate_header(self, request) -> str:
        # Makes a missing or bad key a 401 (with this challenge), not a 403.
        return 'Bearer realm="api"'


class TokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.TokenAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A user's key from /account/token/, as `Bearer <key>` (or `Token "
            "<key>`); it acts with that user's rights.",
        }


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "rest_framework.authentication.SessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}
