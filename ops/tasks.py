"""Thin Celery tasks: they take ids and call the erasure. Safe to deliver twice."""

from celery import shared_task
from django.conf import settings

from ops import erasure
from ops.pruning import prune_finished


# celery-types 0.26 predates Celery 5.7's retry_on_worker_lost, hence the ignore.
@shared_task(  # type: ignore[call-overload]
    acks_late=True,
    reject_on_worker_lost=True,
    retry_on_worker_lost=True,
    max_retries=3,  # an erasure that kills its worker every time stops; the sweep takes over
)
def take_erasure(erasure_id: int) -> str:
    return erasure.erasure_take(erasure_id)


@shared_task(ignore_result=True)
def retention() -> int | None:
    """Beat, daily: keep only the last checkpoint of threads finished long enough ago, and
    forget what ended before the retention period, by the erasure's own steps."""
    if days := settings.REFUNDS_RETAIN_CHECKPOINTS_DAYS:
        prune_finished(days)
    started = erasure.retention_request()
    return started.pk if started else None
