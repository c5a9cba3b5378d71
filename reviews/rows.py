"""The review queue's cards, rendered once and kept (cache `cards`) under a digest of everything
they show, so a kept card is never stale: rendering them was most of the page's time. Readers of
the same standing share them."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from django.core.cache import caches
from django.db.models import Model
from django.template.context import Context
from django.utils import timezone
from redis.exceptions import RedisError

from refunds.models import Ticket, user_roles

CSRF_MARK = "csrf-token-put-in-per-request"
_DOWN = "reviews.rows: the cards cache is down"


def kept(context: Context, key: str) -> str | None:
    """The card kept under `key`, if any. A cache that is down is asked once per page: a hung
    Redis would otherwise hold the page for its timeout once per card."""
    if context.render_context.get(_DOWN):
        return None
    try:
        return caches["cards"].get(key)
    except RedisError:
        context.render_context[_DOWN] = True
        return None


def keep(context: Context, key: str, html: str) -> None:
    if context.render_context.get(_DOWN):
        return
    try:
        caches["cards"].set(key, html)
    except RedisError:
        context.render_context[_DOWN] = True


def _columns(row: Model | None) -> list:
    if row is None:
        return []
    return [getattr(row, field.attname) for field in row._meta.concrete_fields]


def card_key(
    card_version: int | None,
    *,
    claimed_by_id: int | None,
    claim_expires_at: datetime | None,
    review_since: datetime | None,
    now: datetime,
    warn_after: timedelta,
) -> str:
    """A review card's version, as the queue's poll compares it: the ticket's card_version (the
    database moves it with every change the card shows) and what the clock alone changes."""
    live = "c" if claimed_by_id and claim_expires_at and claim_expires_at > now else ""
    late = "o" if review_since and now - review_since > warn_after else ""
    return f"{card_version}{live}{late}"


def row_key(
    ticket: Ticket,
    *,
    user,
    canned: list,
    warn_after: timedelta,
    now: datetime,
    waited: str,
    extra: tuple,
) -> str:
    """Everything a queue card of `ticket` shows for `user` at `now`, as a digest. Of the
    viewer, only what the card shows differently: their roles, and whether the claim is theirs;
    so one rendering serves every reviewer of the same standing (a card that changed is rendered
    once for the desk, not once per reader)."""
    decision = getattr(ticket, "pending_decision", None)
    holder = ticket.claim_holder(now)
    since = ticket.review_since
    parts = [
        _columns(ticket),
        _columns(ticket.order),
        [_columns(link) + _columns(link.order) for link in ticket.links.all()],
        _columns(decision),
        decision.reviewer.username if decision is not None else "",
        holder.username if holder is not None else "",
        holder is not None and holder.pk == user.pk,
        user.is_superuser,
        sorted(user_roles(user)),
        [_columns(reason) + [_columns(t) for t in reason.texts.all()] for reason in canned],
        warn_after,
        timezone.get_current_timezone_name(),
        waited,
        bool(since and now - since > warn_after),
        extra,
    ]
    return hashlib.sha1(repr(parts).encode()).hexdigest()
