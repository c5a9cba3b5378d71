"""Rate limits for the API, counted in the database: one atomic upsert per request, so two
requests at once cannot both be the last one allowed, and no other service to run."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from django.db import connection

from api.models import RateCounter

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Rate:
    limit: int
    seconds: int

    @classmethod
    def parse(cls, text: str) -> Rate:
        """'120/minute', '10/s', '1000/hour'."""
        count, _, period = text.partition("/")
        return cls(int(count), PERIODS[period.strip()[:1].lower()])


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    count: int
    retry_after: int  # seconds until the window ends


def hit(key: str, rate: Rate, *, now: float | None = None) -> Verdict:
    """Count one request under `key`; allowed while the window's count stays within the rate."""
    now = time.time() if now is None else now
    window = int(now // rate.seconds) * rate.seconds
    expires = window + rate.seconds
    table = connection.ops.quote_name(RateCounter._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (key, window_start, count, expires) VALUES (%s, %s, 1, %s) "
            f"ON CONFLICT (key, window_start) DO UPDATE SET count = {table}.count + 1 "
            "RETURNING count",
            [key, window, expires],
        )
        count = cursor.fetchone()[0]
        if count == 1:  # a new window for this key: forget windows that ended
            cursor.execute(f"DELETE FROM {table} WHERE expires < %s", [int(now) - 60])
    return Verdict(count <= rate.limit, count, max(math.ceil(expires - now), 1))


def peek(key: str, rate: Rate, *, now: float | None = None) -> Verdict:
    """Where `key` stands in the current window, without counting anything."""
    now = time.time() if now is None else now
    window = int(now // rate.seconds) * rate.seconds
    row = RateCounter.objects.filter(key=key, window_start=window).values("count").first()
    count = row["count"] if row else 0
    return Verdict(count < rate.limit, count, max(math.ceil(window + rate.seconds - now), 1))
