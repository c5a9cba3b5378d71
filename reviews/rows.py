"""The review queue's rows, rendered once and kept while nothing they show changes.

A queue page is 25 cards, each with its claim, answers and forms; rendering them was most of the
page's time (docs/benchmarks.md). A card's HTML is kept in this process under a digest of
everything it is drawn from: every column of the ticket, its orders, the decision recorded for
it, the reviewer and their roles, the canned replies, the time zone, and what the clock alone
changes (the wait in minutes, overdue or not, whether a claim is still live). A change to any of
them is a new key, so a kept card is never stale; the CSRF token is put in at each request.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from datetime import datetime, timedelta

from django.db.models import Model
from django.utils import timezone

from refunds.models import Ticket, user_roles

KEPT = 2000  # cards per process: a desk's busiest queues, a few KB each
CSRF_MARK = "csrf-token-put-in-per-request"


class _Kept:
    """A small least-recently-used map, shared by the threads of one process."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._rows: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            html = self._rows.get(key)
            if html is not None:
                self._rows.move_to_end(key)
            return html

    def put(self, key: str, html: str) -> None:
        with self._lock:
            self._rows[key] = html
            self._rows.move_to_end(key)
            while len(self._rows) > self.size:
                self._rows.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()


kept = _Kept(KEPT)


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
        [_columns(reason) for reason in canned],
        warn_after,
        timezone.get_current_timezone_name(),
        waited,
        bool(since and now - since > warn_after),
        extra,
    ]
    return hashlib.sha1(repr(parts).encode()).hexdigest()
