"""Thin Celery tasks: they take ids and call the runner or a service. Safe to deliver twice."""

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from refunds import mail, metrics, runner, services
from refunds.models import ReconcileRun


# celery-types 0.26 predates Celery 5.7's retry_on_worker_lost, hence the ignore.
@shared_task(  # type: ignore[call-overload]
    acks_late=True,
    reject_on_worker_lost=True,
    retry_on_worker_lost=True,
    max_retries=3,  # a task that kills its worker every time stops; the sweep takes over
)
def advance_ticket(ticket_id: int) -> str:
    with soft_limit_drains(advance_ticket, runner.drain_running):
        return runner.advance(ticket_id)


@contextmanager
def soft_limit_drains(task: Any, drain: Callable[[str], None]) -> Iterator[None]:
    """The soft time limit drains the run at its next step instead of raising wherever it is
    (between a charge and its ledger row). Only prefork's main thread may set a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # The limit travels in the message, set by whoever sent it, else the worker's own.
    soft = (task.request.timelimit or (None, None))[1] or task.soft_time_limit
    reason = f"soft time limit ({soft} s) passed"
    previous = signal.signal(signal.SIGUSR1, lambda *_: drain(reason))
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


@shared_task(ignore_result=True)
def recover_tickets() -> int:
    # First: a sweep that fails on the broker still shows the schedule ticks (/readyz).
    services.sweep_mark_ran(name=services.RECOVERY_SWEEP)
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


@shared_task(acks_late=True, ignore_result=True)
def handle_stripe_event(event_pk: int) -> str:
    """A read that fails leaves the event for the recovery sweep."""
    return services.stripe_event_handle(event_pk)


@shared_task(ignore_result=True)
def reconcile_payments() -> int:
    """Daily; stops in time to end before the soft time limit: the orders left wait a day."""
    report = services.reconcile_payments(
        since=timezone.now() - timedelta(days=settings.REFUNDS_RECONCILE_DAYS),
        deadline=time.monotonic() + settings.CELERY_TASK_SOFT_TIME_LIMIT * 0.75,
        by=ReconcileRun.By.BEAT,
    )
    return len(report.problems)


@shared_task(ignore_result=True)
def escalate_overdue_reviews() -> int:
    """The review desk's escalation timers: safe to run twice (conditional UPDATEs)."""
    done = services.reviews_escalate_overdue()
    waits = services.questions_wait_timers()
    goods = services.returns_wait_timers()
    chose = services.offers_wait_timers()
    return len(chose) + sum(len(ids) for ids in (*done.values(), *waits.values(), *goods.values()))
