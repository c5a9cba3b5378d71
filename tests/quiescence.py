"""Quiet: nothing queued at the broker, nothing running in a live worker, no live lease, nothing
waiting for a worker. A test that asserts something did *not* happen (a second charge, a second
mail) waits for quiet first, with a bound: a fixed sleep passes falsely whenever the machine is
slower than the sleep, and this fails loudly instead.

What each part rules out:
- queued: a task sent (a wake-up, a resend, a second delivery) that no worker took yet;
- running: a task a live worker took and has not acked (tasks are acked late: acked means done),
  the process woken from SIGSTOP included; a message a *dead* worker took stays unacked until the
  broker's visibility timeout, but nothing can act on it, so it does not count;
- leased: a run under way (or a lease a killed worker left, until it runs out);
- needing: work that a sweep would hand to a worker (`Ticket.objects.needing_worker()`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from devtools.processes import CeleryProcess
from refunds.models import Ticket

# kombu's Redis transport keeps each delivered, unacked message in this hash until it is acked.
UNACKED_KEY = "unacked"
PIDBOX_REPLIES = ".reply.celery.pidbox"  # `celery inspect` answers, not work


@dataclass(frozen=True)
class Activity:
    queued: int
    running: frozenset[str]  # task ids a live worker holds unacked
    leased: frozenset[int]
    needing: frozenset[int]

    def quiet(self, needing: frozenset[int]) -> bool:
        return not self.queued and not self.running and not self.leased and self.needing == needing


def broker_messages() -> tuple[int, list[str]]:
    """Messages waiting in any queue, and the task ids of those delivered but not acked."""
    from config.celery_app import app

    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        queued = sum(
            client.llen(key)
            for key in client.scan_iter(_type="list")
            if PIDBOX_REPLIES not in key.decode(errors="replace")
        )
        unacked = client.hvals(UNACKED_KEY)
    return queued, [_task_id(raw) for raw in unacked]


def _task_id(raw: bytes) -> str:
    message = json.loads(raw)[0]  # kombu stores [message, exchange, routing key]
    return message.get("headers", {}).get("id") or message["properties"]["correlation_id"]


def orphaned(task_ids: Iterable[str], workers: Iterable[CeleryProcess]) -> set[str]:
    """Task ids a worker that is no longer alive received: it died (or stopped) holding them."""
    gone = [worker.output() for worker in workers if not worker.alive]
    return {task_id for task_id in task_ids if any(f"[{task_id}] received" in g for g in gone)}


def activity(workers: Iterable[CeleryProcess]) -> Activity:
    workers = list(workers)
    queued, unacked = broker_messages()
    live = Ticket.objects.exclude(pk__in=Ticket.objects.leasable().values("pk"))
    return Activity(
        queued=queued,
        running=frozenset(set(unacked) - orphaned(unacked, workers)),
        leased=frozenset(live.values_list("pk", flat=True)),
        needing=frozenset(Ticket.objects.needing_worker().values_list("pk", flat=True)),
    )


def quiesce(
    workers: Iterable[CeleryProcess],
    *,
    needing: Iterable[int] = (),
    timeout: float = 60,
    polls: int = 3,
    every: float = 0.2,
) -> None:
    """Wait until the system is quiet (see the module's doc) on `polls` polls in a row, or fail
    naming what still moved. `needing` names tickets the test left waiting for a worker on
    purpose (a decision whose wake-up it dropped). Several polls in a row cover the instant a
    worker has popped a message and not yet recorded it as unacked."""
    workers = list(workers)
    expected = frozenset(needing)
    deadline = time.monotonic() + timeout
    in_a_row = 0
    seen = activity(workers)
    while True:
        in_a_row = in_a_row + 1 if seen.quiet(expected) else 0
        if in_a_row >= polls:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not quiet after {timeout:g} s: {seen.queued} queued, running "
                f"{sorted(seen.running)}, leased tickets {sorted(seen.leased)}, needing a worker "
                f"{sorted(seen.needing)} (expected {sorted(expected)})"
            )
        time.sleep(every)
        seen = activity(workers)
