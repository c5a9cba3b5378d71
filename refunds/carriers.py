"""Carriers' tracking lookups; async, so the workflow can cut an attempt off in time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.db import connection
from django.utils.module_loading import import_string

from core.network import outside_transaction
from refunds.flow.state import Tracking


class DemoCarrier:
    """Answers from the demo catalogue: the order's own delivery date."""

    async def track(self, order_number: str) -> Tracking:
        def read() -> Tracking:
            from refunds.models import Order

            try:
                delivered = (
                    Order.objects.filter(number=order_number)
                    .values_list("delivered_on", flat=True)
                    .first()
                )
            finally:
                connection.close()  # this thread's own connection, not left open
            return {"delivered_on": delivered.isoformat()} if delivered else {}

        return await asyncio.to_thread(read)


def tracker() -> Callable[[str], Awaitable[Tracking]] | None:
    """The configured carrier's lookup, as the workflow calls it; None without a carrier."""
    if not settings.REFUNDS_CARRIER:
        return None
    carrier = import_string(settings.REFUNDS_CARRIER)()

    def track(order_number: str) -> Awaitable[Tracking]:
        outside_transaction("the carrier")  # where the lookup is asked for, before it runs
        return carrier.track(order_number)

    return track
