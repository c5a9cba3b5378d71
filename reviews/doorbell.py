"""The review queue's doorbell: one watcher per events process reads the desk's change clock
(refunds.selectors.queue_clock) every WATCH_SECONDS and rings the reviewers connected to that
process, one stream per role, with the ids and versions of the cards that moved. The page then
asks the web for them in one poll (static/push.js); no customer's data goes down the stream.

Why the database and not Redis pub/sub: the clock is written by triggers in the transaction that
changes the card, so a reader sees a version only once it is committed, and no write path (raw
SQL in the lease, the admin, a worker) has to remember to publish. The cost is one index read per
process per tick, whatever the number of reviewers connected."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction

from refunds import permissions
from refunds.models import Ticket, TicketQuerySet
from refunds.selectors import queue_clock

WATCH_SECONDS = 0.2
MOST_CARDS = 200  # named in one event; more moved at once, and the event says only the clock
AGENT, MANAGER = "agent", "manager"
ROLES = (AGENT, MANAGER)
log = logging.getLogger(__name__)


def stream_role(user) -> str | None:
    """Whose queue the user's stream follows: a manager's (with cover, every review), an agent's."""
    if permissions.oversees(user):
        return MANAGER
    return AGENT if permissions.is_agent(user) else None


def _queue(role: str) -> TicketQuerySet:
    return Ticket.objects.awaiting() if role == MANAGER else Ticket.objects.for_agents()


@contextmanager
def _snapshot() -> Iterator[None]:
    """One view of the database for the reads of a tick (PostgreSQL's default sees each
    statement's own): a card that moves between them is read as it was, and again next tick."""
    outermost = not connection.in_atomic_block  # (a test's transaction has its own)
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


class Watcher:
    """The clock as last read, and which cards each role's queue showed then: a card that just
    left a queue (decided, escalated) still rings that queue's readers."""

    def __init__(self) -> None:
        self.clock: int | None = None
        self.shown: dict[str, set[int]] = {}

    def tick(self) -> dict[str, list[list[int | None]] | None]:
        """The [id, version, waiting since (epoch ms, or None)] of the cards moved since the last
        tick, by role that may show them;
        None for every role when more than MOST_CARDS moved at once (an import): resync."""
        with _snapshot():
            clock = queue_clock()
            if clock == self.clock:
                return {}
            since = Ticket.objects.filter(card_version__gt=self.clock or 0).order_by()
            # [version, waiting since]: the queue shows the longest waiting first, so a first
            # page with more after it cannot show a card that waits since after its last one.
            moved = {
                pk: [card_version, _epoch_ms(waiting)]
                for pk, card_version, waiting in since.values_list(
                    "id", "card_version", "review_since"
                )[: MOST_CARDS + 1]
            }
            if self.clock is None or len(moved) > MOST_CARDS:
                self.shown = {r: set(_queue(r).values_list("id", flat=True)) for r in ROLES}
                resync, self.clock = self.clock is not None, clock
                return dict.fromkeys(ROLES) if resync else {}
            now = {
                r: set(_queue(r).filter(id__in=moved).values_list("id", flat=True)) for r in ROLES
            }
        self.clock = clock
        rings: dict[str, list[list[int | None]] | None] = {}
        for role, shows in now.items():
            ids = shows | (self.shown[role] & moved.keys())
            self.shown[role] = (self.shown[role] - moved.keys()) | shows
            if ids:
                rings[role] = [[pk, *moved[pk]] for pk in sorted(ids)]
        return rings


def _epoch_ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _close() -> None:
    """The watcher's connection, looked up in its thread (`connection.close` taken in the event
    loop's thread is that thread's: the watcher then kept its dead one, as a test saw)."""
    connection.close()


class Doorbell:
    """The watcher's task and the connected streams of this process (one event loop)."""

    def __init__(self) -> None:
        self.clock = 0
        self.streams: dict[str, set[asyncio.Queue]] = {AGENT: set(), MANAGER: set()}
        self.ready: asyncio.Event | None = None
        self.task: asyncio.Task | None = None

    async def stream(self, role: str) -> AsyncIterator[str]:
        """Server-sent events: the clock now (the page resyncs), then each ring, kept alive."""
        if self.task is None:
            self.ready = asyncio.Event()
            self.task = asyncio.create_task(self._watch())
        inbox: asyncio.Queue = asyncio.Queue(maxsize=100)
        self.streams[role].add(inbox)  # before the clock is read: no ring falls between
        try:
            assert self.ready is not None
            await self.ready.wait()
            yield "retry: 2000\n" + _event("clock", {"clock": self.clock})
            while True:
                try:
                    ring = await asyncio.wait_for(
                        inbox.get(), settings.REFUNDS_EVENTS_HEARTBEAT_SECONDS
                    )
                except TimeoutError:
                    yield ": still here\n\n"
                    continue
                if ring["cards"] is None:  # too many to name: the page resyncs
                    yield _event("clock", {"clock": ring["clock"]})
                else:
                    yield _event("cards", ring)
        finally:
            self.streams[role].discard(inbox)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        # One thread, so one database connection, for the life of the process.
        database = ThreadPoolExecutor(1, thread_name_prefix="doorbell")
        watcher = Watcher()
        while True:
            try:
                rings = await loop.run_in_executor(database, watcher.tick)
            except Exception:  # the database went away: the streams stay, the pages poll
                log.exception("the doorbell could not read the queue's clock")
                await loop.run_in_executor(database, _close)
                await asyncio.sleep(1)
                continue
            self.clock = watcher.clock or 0
            assert self.ready is not None
            self.ready.set()
            for role, cards in rings.items():
                for inbox in self.streams[role]:
                    # A reader this far behind has a ring waiting already; its poll reads all.
                    if not inbox.full():
                        inbox.put_nowait({"clock": self.clock, "cards": cards})
            await asyncio.sleep(WATCH_SECONDS)


doorbell = Doorbell()
