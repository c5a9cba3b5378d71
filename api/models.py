"""The API's own tables: tokens, rate counters, idempotent requests."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models


class IdempotentRequest(models.Model):
    """An API request made with an Idempotency-Key header, and the response it got."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    # The method and route, such as "POST api:messages"; rows kept from before it was recorded
    # have "" and answer nothing.
    endpoint = models.CharField(max_length=100)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    # The answer as JSON text, kept exactly: an answer may echo a NUL the caller sent (an order
    # number refused for it), which PostgreSQL's jsonb cannot hold.
    response = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "endpoint", "key"], name="one_response_per_endpoint_and_key"
            ),
        ]

    def __str__(self) -> str:
        return f"Idempotency-Key {self.key} of {self.user}"


def hash_token(key: str) -> str:
    # Keys are 240 random bits: a plain SHA-256 is as good as a slow hash here, and a lookup by
    # hash is one indexed read (GitHub and Stripe store API keys this way).
    return hashlib.sha256(key.encode()).hexdigest()


class ApiToken(models.Model):
    """A user's API key, stored as its SHA-256: the key itself is shown once, when it is made."""

    PREFIX = "rdk_"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_token"
    )
    key_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=16, blank=True)  # the key's first characters, to tell
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"API token {self.hint}… of {self.user}"

    @classmethod
    def issue(cls, user) -> tuple[ApiToken, str]:
        """A new key for this user, replacing any earlier one, with the row."""
        key = cls.PREFIX + secrets.token_urlsafe(30)
        cls.objects.filter(user=user).delete()
        token = cls.objects.create(user=user, key_hash=hash_token(key), hint=key[:10])
        return token, key

    @classmethod
    def find(cls, key: str) -> ApiToken | None:
        if not key or len(key) > 200:
            return None
        return cls.objects.select_related("user").filter(key_hash=hash_token(key)).first()


class RateCounter(models.Model):
    """Requests counted per key (an address, a user) in fixed windows (api/limits.py)."""

    key = models.CharField(max_length=200)
    window_start = models.BigIntegerField()  # start of the window, in seconds since the epoch
    count = models.PositiveIntegerField(default=0)
    expires = models.BigIntegerField(db_index=True)  # end of the window, same unit

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "window_start"], name="one_counter_per_window")
        ]

    def __str__(self) -> str:
        return f"{self.key} @ {self.window_start}: {self.count}"
