"""The review queue's rows, rendered once and kept while nothing they show changes.

A queue page is 25 cards, each with its claim, answers and forms; rendering them was most of the
page's time (docs/benchmarks.md). A card's HTML is kept in Django's cache (the `cards` alias:
the deployed Redis, or this process) under a digest of everything it is drawn from: every column
of the ticket, its orders, the decision recorded for it, the reviewer and their roles, the canned
replies, the time zone, and what the clock alone changes (the wait in minutes, overdue or not,
whether a claim is still live). A change to any of them is a new key, so a kept card is never
stale; the CSRF token is put in at each request.
"""

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
    """The card kept under `key`, if any. A cache that is down costs this page its cards'
    rendering, not the page, and is asked only once per page (a hung Redis would otherwise hold
    the page for its timeout once per card)."""
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
    """Everything a queue card of `ticket` shows for `user` at `now` (`waited`: the wait in the
    words the card shows it), as a digest."""
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
        user.pk,
        user.get_username(),
        sorted(user_roles(user)),
        [_columns(reason) + [_columns(t) for t in reason.texts.all()] for reason in canned],
        warn_after,
        timezone.get_current_timezone_name(),
        waited,
        bool(since and now - since > warn_after),
        extra,
    ]
    return hashlib.sha1(repr(parts).encode()).hexdigest()
