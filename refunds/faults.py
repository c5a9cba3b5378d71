"""Fault injection for crash tests: kill (or stall) this process at a named point of a thread.

REFUNDS_CRASH_PLAN names a JSON file {"<thread_id or *>": {"point": "...", "times": N,
"action": "exit" | "sleep", "seconds": S}}. Each firing leaves a marker file beside the plan, so a
plan with times=1 fires once and the next worker finishes the thread; times=-1 fires every time
(a poison ticket). "sleep" stalls the run while holding the lease, so a test can kill the worker
from outside mid-thread. Unset, crash_point() returns at once.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from django.conf import settings

POINTS = (
    "lookup",
    "fraud_check",
    "history_check",
    "check_policy",
    "charge_card:before_gateway",
    "charge_card:after_gateway",
    "email:before_send",
    "email:after_send",
    "resume",
    "after:lookup",
    "after:check_policy",
    "after:triage",
    "after:approve",
    "after:charge_card",
)


def _plan() -> dict:
    try:
        return json.loads(Path(settings.REFUNDS_CRASH_PLAN).read_text())
    except FileNotFoundError:
        return {}


def crash_point(ticket_key: str, point: str) -> None:
    if not settings.REFUNDS_CRASH_PLAN:
        return
    plan = _plan()
    entry = plan.get(ticket_key) or plan.get("*")
    if not entry or entry.get("point") != point:
        return
    times = int(entry.get("times", 1))
    markers = Path(settings.REFUNDS_CRASH_PLAN + ".fired")
    markers.mkdir(exist_ok=True)
    fired = len(list(markers.glob(f"{ticket_key}@{point}@*")))
    if 0 <= times <= fired:
        return
    (markers / f"{ticket_key}@{point}@{fired}@{os.getpid()}").touch()
    if entry.get("action") == "sleep":
        time.sleep(float(entry.get("seconds", 30)))
        return
    os._exit(1)  # no exception, no cleanup: what an OOM kill or a pulled plug looks like


def fired(plan_path: str | Path) -> list[str]:
    """The markers left by firings: '<thread>@<point>@<n>@<pid>'."""
    markers = Path(str(plan_path) + ".fired")
    return sorted(p.name for p in markers.glob("*")) if markers.exists() else []
