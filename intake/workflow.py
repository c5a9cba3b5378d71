"""The intake: an @entrypoint per message runs four @tasks (intake/steps.py), each idempotent by
the message for a kill between its effect and its checkpoint; the message's lease epoch fences
the checkpoint and every effect."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string
from langgraph.errors import GraphDrained
from langgraph.func import entrypoint

from intake.models import Message
from intake.steps import (
    TABLE,
    IntakeContext,
    Item,
    acknowledge,
    current_lease,
    find_orders,
    open_ticket,
    read_message,
)
from refunds import lease as leases
from refunds import persistence
from refunds.flow.errors import EffectBusy
from refunds.functional import TaskWrapper, tasks
from refunds.persistence import FenceLost

log = logging.getLogger(__name__)


TASKS: dict[str, Callable[..., Any]] = {
    "read": read_message,
    "find_orders": find_orders,
    "open_ticket": open_ticket,
    "acknowledge": acknowledge,
}


def build_workflow(checkpointer: Any, wrap: TaskWrapper | None = None):
    """The intake's entrypoint on `checkpointer`; `wrap` wraps every task (crash tests)."""
    steps = tasks("intake", TASKS, checkpointer, current_lease, wrap)

    @entrypoint(checkpointer=checkpointer, context_schema=IntakeContext)
    def intake(item: Item) -> dict[str, Any]:
        read = steps["read"](item).result()
        found = steps["find_orders"](item, read).result()
        where = steps["open_ticket"](item, read, found).result()
        steps["acknowledge"](item, where).result()
        return where

    return intake


@cache
def _compiled(checkpointer: Any, wrapper: TaskWrapper | None):
    # Keyed by the checkpointer: this process's (a forked child opens its own), the one open now.
    return build_workflow(checkpointer, wrapper)


def workflow():
    path = settings.WORKFLOW_TASK_WRAPPER
    return _compiled(persistence.checkpointer(), import_string(path) if path else None)


_running: list[leases.Lease] = []  # the leases this process runs a message's intake under now


def drain_running(reason: str) -> None:
    """Stop this process's runs before their next task (soft limit); safe in a signal handler."""
    for lease in list(_running):
        lease.drain(reason)


def message_take(message_id: int) -> str:
    """Run the message's intake to its end under its lease: what a worker's task does. Safe to
    call twice or concurrently: the lease lets one through, the checkpoint skips what is done."""
    thread_id = Message.objects.filter(pk=message_id).values_list("thread_id", flat=True).first()
    if thread_id is None:
        return "missing"
    lease = leases.grant_row(TABLE, message_id, thread_id=thread_id, leasable="finished_at IS NULL")
    if lease is None:
        return "busy or finished"
    mine = Message.objects.filter(pk=message_id, lease_epoch=lease.epoch)
    if lease.attempts > settings.REFUNDS_MAX_ATTEMPTS:
        return _give_up(lease, mine)
    item: Item = {"message_id": message_id, "thread_id": thread_id}
    _running.append(lease)
    try:
        with lease.kept_alive():
            if not persistence.checkpointer().claim_fence(thread_id, lease.epoch):
                raise FenceLost(f"a newer epoch than {lease.epoch} holds {thread_id}")
            _run(lease, item)
    except (GraphDrained, FenceLost) as exc:
        if lease.drain_reason and not lease.lost_reason:
            # Stopped before a task, its results saved: the sweep hands the message on.
            log.warning("message %s: run drained: %s", message_id, lease.drain_reason)
            _release(mine, last_error=f"drained: {lease.drain_reason}"[:2000])
            return "drained"
        log.warning("message %s: run stopped, lease lost: %s", message_id, exc)
        _release(mine, last_error=f"lease lost: {exc}"[:2000])
        return "lease lost"
    except EffectBusy as exc:  # a paused process is inside its email: not this run's failure
        _release(mine, attempts=max(lease.attempts - 1, 0), last_error=str(exc)[:2000])
        return "busy"
    except Exception as exc:
        log.exception("message %s: intake failed", message_id)
        _release(mine, last_error=f"{type(exc).__name__}: {exc}"[:2000])
        return "error"
    finally:
        _running.remove(lease)
    _release(mine, finished_at=timezone.now(), attempts=0, last_error="")
    return "finished"


def _release(mine, **fields: Any) -> int:
    return mine.update(lease_owner="", lease_expires_at=None, **fields)


def _run(lease: leases.Lease, item: Item) -> None:
    flow = workflow()
    config: Any = {"configurable": {"thread_id": item["thread_id"], "fence": lease.epoch}}
    state = flow.get_state({"configurable": {"thread_id": item["thread_id"]}})
    if state.values and not state.next:
        return  # it ran to its end before; only the release was lost
    # A thread of another shape reads as not begun and starts again: each task is idempotent.
    flow.invoke(
        None if state.next else item,
        config,
        context=IntakeContext(lease=lease),
        durability="sync",
        control=lease.control(),
    )


def _give_up(lease: leases.Lease, mine) -> str:
    """The attempt cap: the message goes to a person, with the last error; nothing is lost."""
    tries = lease.attempts - 1
    reason = (
        f"The intake stopped after {tries} attempts "
        f"({lease.last_error or 'its worker died'}); sort it by hand."
    )
    # Placed already (only its acknowledgment failed): it stays where it went.
    mine.filter(status=Message.Status.RECEIVED).update(
        status=Message.Status.NEEDS_SORTING, sorting_reason=reason[:2000]
    )
    _release(mine, finished_at=timezone.now(), last_error=reason[:2000])
    status = Message.objects.filter(pk=lease.row_id).values_list("status", flat=True).get()
    log.warning("message %s: the intake gave up after %s attempts: %s", lease.row_id, tries, status)
    return status
