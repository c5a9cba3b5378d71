"""Fault injection for crash tests: kill, stall or stop this process at a named point of a thread.

Installed only when REFUNDS_CRASH_PLAN is set (the tests and `manage.py crashtest` set it; see
config/settings.py): it wraps every node and the payment gateway, and observes the runner's steps
and the outbox's deliveries. The application itself never calls into this module.

REFUNDS_CRASH_PLAN names a JSON file {"<thread_id or *>": {"point": "...", "times": N,
"action": "exit" | "sleep" | "stop" | "error", "seconds": S}} (or a list of such entries, for
several points of one thread). Points:

- "<node>": at the start of that node's body (check_order, gather, ..., charge_order, email);
  the fan-outs' tasks also fire "<node>:<order>" (check_order:1044, charge_order:1044), so a
  plan can stop one order's task and not its siblings (they run in parallel threads of one
  superstep);
- "intake:<task>", "intake:<task>:done": the intake workflow's tasks (read, find_orders,
  open_ticket, acknowledge), at their start and once they returned (effect made, result not yet
  checkpointed); the thread is the message's (intake-...); "erase:<task>", "erase:<task>:done"
  the same for the erasure workflow's tasks (ops/erasure.py), on the erasure's thread;
- "after:<node>": between nodes, once the node's checkpoint is on disk; "resume": before a resume;
  "hand_back:state_written": a refund the processor failed later is written into the thread
  (its update_state on disk) and its charge not yet marked handed back;
- "gateway:before", "gateway:after": around the gateway's charge call; a charge of one order
  (its key `<thread>:charge_card:<order>:<amount>`) also fires "gateway:before:<order>" and
  "gateway:after:<order>";
- "smtp:before": before the mail server conversation; "smtp:handed_over": the final "." went to
  the server (its handover mark committed) and its answer has not come back yet; "smtp:after":
  the server accepted the message and its sent mark has not committed yet (both inside the one
  window of "mail once");
- "renew": in the lease renewal ("error" makes the renewal fail with a database error).

Besides, every process logs what it holds and when, beside the plan ("<plan>.calls": a Celery
task running, a call open at the gateway, a connection open to the mail server), so a crash
test tells what an outside kill of a worker interrupted (calls()).

Actions: "exit" is os._exit(1), what an OOM kill or a pulled plug looks like; "sleep" stalls for
`seconds` while holding the lease; "stop" stops this process (SIGSTOP, sent to the thread at
the point, so it stops there and not a moment later; the test sends SIGCONT later); "error"
raises a database OperationalError. Each firing leaves a marker file beside the plan
("<thread>@<point>@<n>@<pid>"), so times=1 fires once; times=-1 fires every time (the parallel
tasks of one process count their firings under one lock, so times=1 fires once there too).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from celery.signals import task_postrun, task_prerun
from django.conf import settings
from django.core.mail.backends.smtp import EmailBackend
from django.db import OperationalError
from django.utils.module_loading import import_string

from refunds.flow.state import Part

if TYPE_CHECKING:  # not imported at run time: the refunds.payments package needs Django's apps
    from refunds.payments.records import ProcessorDispute, ProcessorRefund


def _plan() -> dict:
    try:
        return json.loads(Path(settings.REFUNDS_CRASH_PLAN).read_text())
    except FileNotFoundError:
        return {}


_counting = threading.Lock()  # a fan-out's tasks are threads of one process


def crash_point(thread_id: str, point: str) -> None:
    if not settings.REFUNDS_CRASH_PLAN:
        return
    plan = _plan()
    entries = plan.get(thread_id) or plan.get("*") or []
    entries = entries if isinstance(entries, list) else [entries]
    entry = next((e for e in entries if e.get("point") == point), None)
    if entry is None:
        return
    times = int(entry.get("times", 1))
    markers = Path(settings.REFUNDS_CRASH_PLAN + ".fired")
    markers.mkdir(exist_ok=True)
    with _counting:
        fired_before = len(list(markers.glob(f"{thread_id}@{point}@*")))
        if 0 <= times <= fired_before:
            return
        (markers / f"{thread_id}@{point}@{fired_before}@{os.getpid()}").touch()
    action = entry.get("action", "exit")
    if action == "sleep":
        time.sleep(float(entry.get("seconds", 30)))
    elif action == "stop":
        # From this thread: a SIGSTOP sent to the process (os.kill) is taken by another of its
        # threads (the main one), and this one runs on until that thread stops the group: a
        # charge task went on into its ledger row before it stopped. Sent to this thread, the
        # whole process stops before the next line.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    elif action == "error":
        raise OperationalError(f"injected database error at {point}")
    else:
        os._exit(1)


def fired(plan_path: str | Path) -> list[str]:
    """The markers left by firings: '<thread>@<point>@<n>@<pid>'."""
    markers = Path(str(plan_path) + ".fired")
    return sorted(p.name for p in markers.glob("*")) if markers.exists() else []


def _delivery_signal(sender, *, key: str, event: str, **kwargs) -> None:
    _delivery_point(key, event)


def _step_point(sender, *, thread_id: str, event: str, **kwargs) -> None:
    crash_point(thread_id, event)


# The fan-out's tasks (refunds/flow/state.py's CheckTask, ChargeTask): where each names its order.
_TASK_ORDER = {"check_order": "order_number", "charge_order": "number"}


def wrap_node(name: str, fn):
    order_field = _TASK_ORDER.get(name)

    @functools.wraps(fn)
    def with_crash_point(state, *args, **kwargs):
        crash_point(state["ticket_key"], name)
        if order_field and state.get(order_field):
            crash_point(state["ticket_key"], f"{name}:{state[order_field]}")
        return fn(state, *args, **kwargs)

    return with_crash_point


def charged_order(ticket_key: str, idempotency_key: str) -> str:
    """The order a charge is for ('<thread>:charge_card:<order>:<amount>', then the parts'
    digest and ':again<n>' where the key has them); '' for a key of before flow version 5
    ('<thread>:charge_card:<amount>')."""
    parts = idempotency_key.removeprefix(ticket_key + ":").split(":")
    return parts[1] if len(parts) >= 3 and parts[0] == "charge_card" else ""


def wrap_task(name: str, fn):
    """The functional-API workflows' tasks (WORKFLOW_TASK_WRAPPER), named "intake:<task>" or
    "erase:<task>": the point `name` at its start, before its effect; "<name>:done" once it
    returned, its effect made and its result not yet in the checkpoint."""

    @functools.wraps(fn)
    def with_crash_points(item, *args, **kwargs):
        crash_point(item["thread_id"], name)
        result = fn(item, *args, **kwargs)
        crash_point(item["thread_id"], f"{name}:done")
        return result

    return with_crash_points


class CrashingGateway:
    """The configured gateway, with crash points around its charge call."""

    def __init__(self):
        # Set by the devtools app with the plan (devtools/apps.py), not by config/settings.py.
        inner: dict[str, str] = getattr(settings, "REFUNDS_CRASH_INNER", {})
        self.inner = import_string(inner["gateway"])()

    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
        parts: Sequence[Part] = (),
    ) -> str:
        order = charged_order(ticket_key, idempotency_key)
        crash_point(ticket_key, "gateway:before")
        if order:
            crash_point(ticket_key, f"gateway:before:{order}")
        with open_call("gateway"):
            receipt = self.inner.charge(
                idempotency_key=idempotency_key,
                amount_cents=amount_cents,
                ticket_key=ticket_key,
                payment_reference=payment_reference,
                parts=parts,
            )
        crash_point(ticket_key, "gateway:after")
        if order:
            crash_point(ticket_key, f"gateway:after:{order}")
        return receipt

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
        with open_call("gateway"):
            return self.inner.lookup(idempotency_key, payment_reference=payment_reference)

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        with open_call("gateway"):
            return self.inner.payment_refunds(payment_reference)

    def payment_disputes(self, payment_reference: str) -> list[ProcessorDispute]:
        with open_call("gateway"):
            return self.inner.payment_disputes(payment_reference)


class TracedSmtpBackend(EmailBackend):
    """Django's SMTP backend, logging when its connection to the mail server opens and closes
    (crashtest sets it as EMAIL_BACKEND): the outbox closes it after every conversation."""

    def open(self) -> bool | None:
        record_call("smtp", "start")
        return super().open()

    def close(self) -> None:
        try:
            super().close()
        finally:
            record_call("smtp", "end")


@contextlib.contextmanager
def open_call(kind: str) -> Iterator[None]:
    record_call(kind, "start")
    try:
        yield
    finally:
        record_call(kind, "end")


def record_call(kind: str, event: str) -> None:
    """That this process started or ended holding a `kind` ("task", "gateway", "smtp")."""
    if not settings.REFUNDS_CRASH_PLAN:
        return
    line = f"{time.time():.6f} {os.getpid()} {os.getpgid(0)} {kind} {event}\n"
    with open(settings.REFUNDS_CRASH_PLAN + ".calls", "a") as calls:
        calls.write(line)


def calls(plan_path: str | Path) -> list[tuple[float, int, int, str, str]]:
    """(time, pid, process group, kind, "start" or "end") of what processes held, oldest
    first."""
    path = Path(str(plan_path) + ".calls")
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        at, pid, group, kind, event = line.split(" ")
        rows.append((float(at), int(pid), int(group), kind, event))
    return sorted(rows)


def held(
    rows: list[tuple[float, int, int, str, str]], group: int, *, died: Collection[int] = ()
) -> set[str]:
    """What the processes of `group` held when they last logged (a killed group: when it was
    killed): each kind whose last event in some process was "start". `died`: processes that
    died at a crash point of their own, whose last "start" says nothing about the group's end."""
    last = {(pid, kind): event for _, pid, g, kind, event in rows if g == group and pid not in died}
    return {kind for (_, kind), event in last.items() if event == "start"}


def _task_started(**kwargs) -> None:
    record_call("task", "start")


def _task_ended(**kwargs) -> None:
    record_call("task", "end")


_DELIVERY_POINTS = {
    "connect": "smtp:before",
    "handed_over": "smtp:handed_over",
    "accepted": "smtp:after",
}


def _delivery_point(key: str, event: str) -> None:
    _record_sender(key, event)
    point = _DELIVERY_POINTS.get(event)
    if point is not None:
        crash_point(key.split(":")[0], point)


def _record_sender(key: str, event: str) -> None:
    """What a process (and its process group: one Celery worker) did in a mail conversation for
    `key`, and when: opened it ("connect"), handed the final "." over, got the server's answer
    ("accepted"), recorded it. A crash test tells from these whose kill a second copy follows."""
    if not settings.REFUNDS_CRASH_PLAN:
        return
    line = f"{time.time():.6f} {os.getpid()} {os.getpgid(0)} {key} {event}\n"
    with open(settings.REFUNDS_CRASH_PLAN + ".senders", "a") as senders:
        senders.write(line)


def senders(plan_path: str | Path) -> list[tuple[float, int, int, str, str]]:
    """(time, pid, process group, key, event) of every step of every mail conversation, oldest
    first."""
    path = Path(str(plan_path) + ".senders")
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        at, pid, group, key, event = line.split(" ", 4)
        rows.append((float(at), int(pid), int(group), key, event))
    return sorted(rows)


def install() -> None:
    """Hook the crash points in (called by the devtools app when a crash plan is set)."""
    from refunds import lease, signals

    # Nodes are wrapped through REFUNDS_NODE_WRAPPER (the devtools app sets it with the plan).
    signals.mail_delivery.connect(_delivery_signal, dispatch_uid="devtools.faults.mail")
    signals.step_reached.connect(_step_point, dispatch_uid="devtools.faults.step")
    task_prerun.connect(_task_started, dispatch_uid="devtools.faults.task_started")
    task_postrun.connect(_task_ended, dispatch_uid="devtools.faults.task_ended")
    real_renew = lease.Lease.renew
    if getattr(real_renew, "crash_point", False):
        return

    def renew(self):
        crash_point(self.thread_id, "renew")
        return real_renew(self)

    renew.crash_point = True  # type: ignore[attr-defined]
    lease.Lease.renew = renew  # type: ignore[method-assign]
