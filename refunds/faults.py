"""Fault injection for crash tests: kill this process at a named point of a chosen thread.

REFUNDS_CRASH_PLAN names a JSON file {"<thread_id or *>": {"point": "...", "times": N}}. Each kill
leaves a marker file beside the plan, so a plan with times=1 kills once and the next worker
finishes the thread; times=-1 kills every time (a poison ticket). Unset, this does nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.conf import settings


def _plan() -> dict:
    path = settings.REFUNDS_CRASH_PLAN
    if not path:
        return {}
    try:
        return json.loads(Path(path).read_text())
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
    if times >= 0 and fired >= times:
        return
    (markers / f"{ticket_key}@{point}@{fired}@{os.getpid()}").touch()
    os._exit(1)  # no exception, no cleanup: what an OOM kill or a pulled plug looks like
