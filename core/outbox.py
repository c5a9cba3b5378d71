"""The outbox's claim, one for every kind of row: only the sender whose claim won sends it."""

from datetime import timedelta

from django.db.models import F, Q, QuerySet
from django.db.models.functions import Now


def stale(window: timedelta) -> Q:
    """A claim older than the send window: its sender stopped (or stalled past it)."""
    return Q(status="sending", claimed_at__lt=Now() - window)


def claim(rows: QuerySet, claim: str, *, due: Q, window: timedelta, **also) -> bool:
    """One conditional UPDATE: a row of `rows` that is due or stale becomes `claim`'s to send."""
    also |= {"claimed_by": claim, "claimed_at": Now(), "attempts": F("attempts") + 1}
    return bool(rows.filter(due | stale(window)).update(status="sending", **also))
