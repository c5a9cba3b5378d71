"""Work asked by task name (no import circle), after commit; the sweep finds what is lost."""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction

log = logging.getLogger(__name__)

ADVANCE = "refunds.tasks.advance_ticket"
RESEND = "refunds.tasks.resend_email"


def wake(ticket_id: int) -> bool:
    return send(ADVANCE, ticket_id)


def wake_after(ticket_id: int, seconds: float) -> bool:
    """wake(), due in `seconds` (a decision's undo grace); lost, the sweep finds it after."""
    return send(ADVANCE, ticket_id, countdown=seconds)


def send(task: str, row_id: int, *, countdown: float | None = None) -> bool:
    """False, logged, when the broker did not take it."""
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
    transaction.on_commit(lambda: send(task, row_id))


def advance_on_commit(ticket_id: int) -> None:
    transaction.on_commit(lambda: wake(ticket_id))


def advance_after_on_commit(ticket_id: int, seconds: float) -> None:
    if seconds <= 0:
        advance_on_commit(ticket_id)
    else:
        transaction.on_commit(lambda: wake_after(ticket_id, seconds))


def resend_on_commit(email_id: int) -> None:
    send_on_commit(RESEND, email_id)
