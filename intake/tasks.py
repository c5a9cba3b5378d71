"""Thin Celery tasks: they take ids and call the intake. Safe to deliver twice."""

from celery import shared_task

from intake import workflow
from refunds.tasks import soft_limit_drains


# celery-types 0.26 predates Celery 5.7's retry_on_worker_lost, hence the ignore.
@shared_task(  # type: ignore[call-overload]
    acks_late=True,
    reject_on_worker_lost=True,
    retry_on_worker_lost=True,
    max_retries=3,  # a message that kills its worker every time stops; the sweep takes over
)
def take_message(message_id: int) -> str:
    # Past the soft limit the run stops before its next task, checkpoint saved.
    with soft_limit_drains(take_message, workflow.drain_running):
        return workflow.message_take(message_id)
