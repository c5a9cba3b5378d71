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

# Other apps' sweeps (the intake's), registered at start-up, so refunds/ imports none of them.
_ALSO: list[Callable[[], list[int]]] = []
RECOVERY_SWEEP = "recovery"  # its SweepRun row, which /readyz reads


def also_recover(sweep: Callable[[], list[int]]) -> None:
    """Run `sweep` (ids re-enqueued; BrokerUnavailable) with every recovery sweep."""
    if sweep not in _ALSO:
        _ALSO.append(sweep)


def sweep_mark_ran(*, name: str) -> None:
    """Say that the periodic sweep `name` ran now (beat sent it and a worker took it)."""
    SweepRun.objects.update_or_create(name=name, defaults={"ran_at": timezone.now()})


def wake_once(rows: QuerySet, wake: Callable[[int], bool]) -> tuple[list[int], list[int]]:
    """Wake `rows` no wake-up waits for; again after REFUNDS_REWAKE_SECONDS (backlog, not lost)."""
    now = timezone.now()
    rewake_before = now - timedelta(seconds=settings.REFUNDS_REWAKE_SECONDS)
    due = rows.filter(Q(woken_at__isnull=True) | Q(woken_at__lt=rewake_before))
    ids = list(due.order_by("pk").values_list("pk", flat=True))
    sent = [row_id for row_id in ids if wake(row_id)]
    rows.model.objects.filter(pk__in=sent).update(woken_at=now)
    return ids, sent


def wake_all(rows: QuerySet, task: str, what: str) -> list[int]:
    """wake_once with `task`; BrokerUnavailable when the broker took only some."""
    ids, sent = wake_once(rows, lambda pk: enqueue.send(task, pk))
    if len(sent) < len(ids):
        raise BrokerUnavailable(
            f"the broker took {len(sent)} of {len(ids)} {what} wake-ups", sent=len(sent)
        )
    return ids


def tickets_recover() -> list[int]:
    """Re-enqueue threads with work left that nobody holds: lost messages and crashes end here."""
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
