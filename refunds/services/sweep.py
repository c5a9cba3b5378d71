"""The recovery sweep: the broker is a wake-up signal, the database the record."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from refunds import enqueue
from refunds.models import SweepRun, Ticket
from refunds.services.errors import BrokerUnavailable

# Other workflows' sweeps (the intake's messages), registered by their app at start-up, so the
# one periodic sweep finds their unfinished rows too without refunds/ importing them.
_ALSO: list[Callable[[], list[int]]] = []
RECOVERY_SWEEP = "recovery"  # its SweepRun row, which /readyz reads


def also_recover(sweep: Callable[[], list[int]]) -> None:
    """Run `sweep` with every recovery sweep; it re-enqueues its own rows and returns their ids,
    raising BrokerUnavailable when the broker took only some."""
    if sweep not in _ALSO:
        _ALSO.append(sweep)


def sweep_mark_ran(*, name: str) -> None:
    """Say that the periodic sweep `name` ran now (beat sent it and a worker took it)."""
    SweepRun.objects.update_or_create(name=name, defaults={"ran_at": timezone.now()})


def wake_once(rows: QuerySet, wake: Callable[[int], bool]) -> tuple[list[int], list[int]]:
    """Send `wake(id)` for each of `rows` (a model with the lease columns) that no wake-up of
    the sweep waits for, and mark those the broker took. Returns (ids due, ids sent).

    A wake-up the sweep sent that no worker took yet is still in the queue (a backlog): another
    copy would only lengthen it. Sent again only after REFUNDS_REWAKE_SECONDS, when it may have
    been lost with the broker; a worker's grant clears the mark."""
    now = timezone.now()
    rewake_before = now - timedelta(seconds=settings.REFUNDS_REWAKE_SECONDS)
    due = rows.filter(Q(woken_at__isnull=True) | Q(woken_at__lt=rewake_before))
    ids = list(due.order_by("pk").values_list("pk", flat=True))
    sent = [row_id for row_id in ids if wake(row_id)]
    rows.model.objects.filter(pk__in=sent).update(woken_at=now)
    return ids, sent


def wake_all(rows: QuerySet, task: str, what: str) -> list[int]:
    """wake_once with the task `task` for each row; BrokerUnavailable when the broker took only
    some (the rest wait for the next sweep). Returns the ids due."""
    ids, sent = wake_once(rows, lambda pk: enqueue.send(task, pk))
    if len(sent) < len(ids):
        raise BrokerUnavailable(
            f"the broker took {len(sent)} of {len(ids)} {what} wake-ups", sent=len(sent)
        )
    return ids


def tickets_recover() -> list[int]:
    """Re-enqueue every thread with work left that no worker holds and no person waits on.

    The broker is a wake-up signal, not the record: a lost message, a killed worker or a crash
    between commit and enqueue all end here."""
    settled_before = timezone.now() - timedelta(seconds=settings.REFUNDS_SWEEP_GRACE_SECONDS)
    ids, sent = wake_once(
        Ticket.objects.needing_worker(settled_before=settled_before), enqueue.wake
    )
    for sweep in _ALSO:
        sweep()
    if len(sent) < len(ids):
        raise BrokerUnavailable(
            f"the broker took {len(sent)} of {len(ids)} wake-ups; the rest wait for the next sweep",
            sent=len(sent),
        )
    return ids
