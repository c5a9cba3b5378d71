"""The one way writes ask workers for work: by task name, after commit. Services call this and
never import the tasks (which call services): no import circle, and one place that knows the
broker is only a wake-up signal."""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction

log = logging.getLogger(__name__)

ADVANCE = "refunds.tasks.advance_ticket"
RESEND = "refunds.tasks.resend_email"


def wake(ticket_id: int) -> bool:
    """Ask a worker to advance the thread. The broker only wakes workers: if it is down, the row
    is already committed and the recovery sweep finds it, so a failed send is logged, not raised."""
    return send(ADVANCE, ticket_id)


def wake_after(ticket_id: int, seconds: float) -> bool:
    """wake(), due in `seconds` (a decision's undo grace). Lost (a broker down, a worker that
    died holding it), the recovery sweep finds the decision once its grace is over."""
    return send(ADVANCE, ticket_id, countdown=seconds)


def send(task: str, row_id: int, *, countdown: float | None = None) -> bool:
    """Ask a worker to run the task named `task` for a row (a ticket, an intake message); False,
    logged, when the broker did not take it: the row is the record, the sweep finds it."""
    try:
        current_app.send_task(task, args=[row_id], countdown=countdown)
    except Exception:  # noqa: BLE001 - kombu raises several kinds for an unreachable broker
        log.warning(
            "could not enqueue %s(%s); the recovery sweep will pick it up",
            task,
            row_id,
            exc_info=True,
        )
        return False
    return True


def send_on_commit(task: str, row_id: int) -> None:
    """send(), once the caller's transaction commits."""
    transaction.on_commit(lambda: send(task, row_id))


def advance_on_commit(ticket_id: int) -> None:
    """Wake a worker for this ticket once the caller's transaction commits."""
    transaction.on_commit(lambda: wake(ticket_id))


def advance_after_on_commit(ticket_id: int, seconds: float) -> None:
    """wake_after(), once the caller's transaction commits; no grace: advance_on_commit()."""
    if seconds <= 0:
        advance_on_commit(ticket_id)
    else:
        transaction.on_commit(lambda: wake_after(ticket_id, seconds))


def resend_on_commit(email_id: int) -> None:
    """An admin's Resend, once the audit entry commits (the outbox makes it send once). A
    broker that is down is logged, not raised: the row stays on the Undelivered page."""
    send_on_commit(RESEND, email_id)
