"""Thin Celery tasks: they take ids and call the runner or a service. Safe to deliver twice."""

from celery import shared_task

from refunds import mail, metrics, runner, services


# celery-types 0.26 predates Celery 5.7's retry_on_worker_lost, hence the ignore.
@shared_task(  # type: ignore[call-overload]
    acks_late=True,
    reject_on_worker_lost=True,
    retry_on_worker_lost=True,
    max_retries=3,  # a task that kills its worker every time stops; the sweep takes over
)
def advance_ticket(ticket_id: int) -> str:
    return runner.advance(ticket_id)


@shared_task(ignore_result=True)
def recover_tickets() -> int:
    try:
        ids = services.tickets_recover()
    except services.BrokerUnavailable as exc:
        metrics.SWEEP_REENQUEUED.inc(exc.sent)
        raise
    metrics.SWEEP_REENQUEUED.inc(len(ids))
    return len(ids)


@shared_task(acks_late=True, autoretry_for=(Exception,), max_retries=5, retry_backoff=True)
def resend_email(email_id: int) -> bool:
    """An admin's Resend: through the outbox, so a repeated delivery of this task sends once."""
    return mail.resend(email_id)


@shared_task(ignore_result=True)
def escalate_overdue_reviews() -> int:
    """The review desk's escalation timers: safe to run twice (conditional UPDATEs)."""
    done = services.reviews_escalate_overdue()
    return len(done["escalated"]) + len(done["reminded"])
