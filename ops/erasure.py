"""Forgetting a customer, on request or past the retention period: a durable workflow on
LangGraph's functional API. An @entrypoint per erasure runs one @task per store
(ops/forgetting.py), each idempotent; a worker killed between two tasks resumes at the first one
not saved, and the erasure is never half done: it runs until its last task has, or an admin
sees it stopped. Its own thread holds ids and counts only, never the customer's data.

An erasure that finds one of its tickets still open waits (status "waiting"): nothing is
erased under a running thread. The recovery sweep starts it again once they have all ended."""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any, TypedDict

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.module_loading import import_string
from langgraph.errors import GraphDrained
from langgraph.func import entrypoint
from langgraph.runtime import get_runtime

from ops import forgetting
from ops.models import Erasure
from refunds import enqueue, persistence
from refunds import lease as leases
from refunds.functional import TaskWrapper, tasks
from refunds.models import AuditEvent, Order
from refunds.models.orders import of_customer
from refunds.persistence import FenceLost
from refunds.services.sweep import wake_all

log = logging.getLogger(__name__)

TAKE = "ops.tasks.take_erasure"
EMAIL_MAX = 254  # the column's, and RFC 5321's for a path
TABLE = Erasure._meta.db_table


class Item(TypedDict):
    """What every task gets first: the erasure, and its thread (crash points key on it)."""

    erasure_id: int
    thread_id: str


@dataclass(frozen=True)
class ErasureContext:
    lease: leases.Lease


def current_lease() -> leases.Lease:
    return get_runtime(ErasureContext).context.lease


def erasure_request(*, email: str, orders: list[str] | tuple[str, ...] = (), by: str) -> Erasure:
    """Record a request to forget the customer writing from `email` (and the orders named, which
    must be theirs) and start it once committed. A request for a customer whose erasure has not
    ended is that erasure. ValidationError, changing nothing, for what cannot be erased."""
    email = email.strip()
    if len(email) > EMAIL_MAX:
        raise ValidationError(f"An email address has at most {EMAIL_MAX} characters.")
    validate_email(email)
    numbers = sorted({n.strip() for n in orders if n.strip()})
    known = dict(Order.objects.filter(number__in=numbers).values_list("number", "customer_email"))
    if unknown := [n for n in numbers if n not in known]:
        raise ValidationError(f"No order {', '.join(unknown)} is known to the desk.")
    if others := [n for n, e in known.items() if e.lower() != email.lower() and e]:
        raise ValidationError(
            f"Order {', '.join(sorted(others))} is not {email}'s: nothing was erased."
        )
    with transaction.atomic():
        running = of_customer(
            Erasure.objects.exclude(status=Erasure.Status.DONE), email, field="email"
        )
        if (already := running.first()) is not None:
            return already
        erasure = Erasure.objects.create(
            kind=Erasure.Kind.CUSTOMER,
            email=email,
            orders=numbers,
            requested_by=by[:200],
            **_new(),
        )
        enqueue.send_on_commit(TAKE, erasure.pk)
    return erasure


def retention_request() -> Erasure | None:
    """What the beat job starts each day: forget what ended before the retention period (and
    attachments past theirs); None when retention is off or a run has not ended yet."""
    days = settings.REFUNDS_RETAIN_PERSONAL_DAYS
    if not days:
        return None
    with transaction.atomic():
        if (
            Erasure.objects.filter(kind=Erasure.Kind.RETENTION)
            .exclude(status=Erasure.Status.DONE)
            .exists()
        ):
            return None
        erasure = Erasure.objects.create(
            kind=Erasure.Kind.RETENTION,
            ended_before=timezone.now() - timedelta(days=days),
            requested_by="retention",
            **_new(),
        )
        enqueue.send_on_commit(TAKE, erasure.pk)
    return erasure


def _new() -> dict[str, str]:
    return {
        "thread_id": f"erasure-{uuid.uuid4().hex}",
        "pseudonym": f"erased-{secrets.token_hex(5)}",
    }


def erasures_recover() -> list[int]:
    """The sweep's part: an erasure whose open tickets have all ended runs again; an erasure no
    worker holds is taken up again."""
    for erasure in Erasure.objects.filter(status=Erasure.Status.WAITING, lease_owner=""):
        if not forgetting.still_open(erasure.waiting_for).exists():
            Erasure.objects.filter(pk=erasure.pk, status=Erasure.Status.WAITING).update(
                status=Erasure.Status.RUNNING
            )
    settled_before = timezone.now() - timedelta(seconds=settings.REFUNDS_SWEEP_GRACE_SECONDS)
    rows = Erasure.objects.filter(
        status=Erasure.Status.RUNNING, finished_at=None, updated_at__lt=settled_before
    ).filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now()))
    return wake_all(rows, TAKE, "erasure")


# The workflow.


def _scope(item: Item) -> forgetting.Scope:
    return forgetting.scope(_erasure(item))


def _wait(item: Item, scope: forgetting.Scope) -> dict[str, Any]:
    _fenced(item).update(status=Erasure.Status.WAITING, waiting_for=scope["waiting_for"])
    return {"waiting_for": scope["waiting_for"]}


def _step(fn: Callable[[Erasure, forgetting.Scope], dict[str, int]]) -> Callable[..., Any]:
    def run(item: Item, scope: forgetting.Scope, previous: Any) -> dict[str, int]:
        current_lease().check()
        return fn(_erasure(item), scope)

    return run


def _finish(
    item: Item, scope: forgetting.Scope, report: dict[str, Any], previous: Any
) -> dict[str, Any]:
    """The report and an audit entry per ticket, naming no one; the email goes from the row."""
    erasure = _erasure(item)
    lease = current_lease()
    for ticket_id in scope["tickets"]:
        done = AuditEvent.objects.filter(
            ticket_id=ticket_id, action=AuditEvent.Action.ERASE, answer__erasure=erasure.pk
        )
        if not done.exists():
            AuditEvent.objects.create(
                ticket_id=ticket_id,
                action=AuditEvent.Action.ERASE,
                answer={"erasure": erasure.pk, "kind": erasure.kind},
                note=f"{erasure.get_kind_display()}: erased by the desk as {erasure.pseudonym}.",
            )
    if not _fenced(item).update(
        status=Erasure.Status.DONE, email="", report=report, finished_at=timezone.now()
    ):
        raise GraphDrained(f"lease epoch {lease.epoch} of erasure {erasure.pk} no longer holds")
    return report


TASKS: dict[str, Callable[..., Any]] = {
    "scope": _scope,
    "wait": _wait,
    **{name: _step(fn) for name, fn in forgetting.STEPS.items()},
    "finish": _finish,
}


def build_workflow(checkpointer: Any, wrap: TaskWrapper | None = None):
    """The erasure's entrypoint on `checkpointer`; `wrap` wraps every task (crash tests)."""
    steps = tasks("erase", TASKS, checkpointer, current_lease, wrap)

    @entrypoint(checkpointer=checkpointer, context_schema=ErasureContext)
    def erase(item: Item) -> dict[str, Any]:
        scope = steps["scope"](item).result()
        if scope["waiting_for"]:
            return steps["wait"](item, scope).result()
        report: dict[str, Any] = {}
        previous: Any = scope
        for name in forgetting.STEPS:
            previous = steps[name](item, scope, previous).result()
            report[name] = previous
        return steps["finish"](item, scope, report, previous).result()

    return erase


@cache
def _compiled(checkpointer: Any, wrapper: TaskWrapper | None):
    # Keyed by the checkpointer: this process's (a forked child opens its own), the one open now.
    return build_workflow(checkpointer, wrapper)


def workflow():
    path = settings.WORKFLOW_TASK_WRAPPER
    return _compiled(persistence.checkpointer(), import_string(path) if path else None)


def _erasure(item: Item) -> Erasure:
    return Erasure.objects.get(pk=item["erasure_id"])


def _fenced(item: Item):
    return Erasure.objects.filter(pk=item["erasure_id"], lease_epoch=current_lease().epoch)


def erasure_take(erasure_id: int) -> str:
    """Run the erasure to its end (or its wait) under its lease: what a worker's task does.
    Safe to call twice or concurrently: the lease lets one through, the checkpoint skips what
    is done."""
    thread_id = Erasure.objects.filter(pk=erasure_id).values_list("thread_id", flat=True).first()
    if thread_id is None:
        return "missing"
    lease = leases.grant_row(
        TABLE,
        erasure_id,
        thread_id=thread_id,
        leasable="status = 'running' AND finished_at IS NULL",
    )
    if lease is None:
        return "busy or ended"
    mine = Erasure.objects.filter(pk=erasure_id, lease_epoch=lease.epoch)
    if lease.attempts > settings.REFUNDS_MAX_ATTEMPTS:
        reason = (
            f"stopped after {lease.attempts - 1} attempts: {lease.last_error or 'its worker died'}"
        )
        _release(mine, finished_at=timezone.now(), last_error=reason[:2000])
        log.warning("erasure %s: %s", erasure_id, reason)
        return "stopped"
    item: Item = {"erasure_id": erasure_id, "thread_id": thread_id}
    try:
        with lease.kept_alive():
            if not persistence.checkpointer().claim_fence(thread_id, lease.epoch):
                raise FenceLost(f"a newer epoch than {lease.epoch} holds {thread_id}")
            _run(lease, item)
    except (GraphDrained, FenceLost) as exc:
        log.warning("erasure %s: run stopped: %s", erasure_id, exc)
        _release(mine, last_error=f"stopped: {exc}"[:2000])
        return "stopped early"
    except Exception as exc:
        log.exception("erasure %s failed", erasure_id)
        _release(mine, last_error=f"{type(exc).__name__}: {exc}"[:2000])
        return "error"
    _release(mine, attempts=0, last_error="")
    return Erasure.objects.filter(pk=erasure_id).values_list("status", flat=True).get()


def _release(mine, **fields: Any) -> int:
    return mine.update(lease_owner="", lease_expires_at=None, **fields)


def _run(lease: leases.Lease, item: Item) -> None:
    flow = workflow()
    config: Any = {"configurable": {"thread_id": item["thread_id"], "fence": lease.epoch}}
    state = flow.get_state({"configurable": {"thread_id": item["thread_id"]}})
    # Resumed where a kill stopped it; or begun, again after a wait for open tickets.
    flow.invoke(
        None if state.next else item,
        config,
        context=ErasureContext(lease=lease),
        durability="sync",
        control=lease.control(),
    )
