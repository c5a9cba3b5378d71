"""State shapes across flow versions. No Django imports.

Every thread is stamped with the flow version it started under (`flow_version` in its state and
on its Ticket row). When a release changes the state's shape, it bumps FLOW_VERSION and adds
UPGRADES[old]: a function from a state of version `old` to the update that makes it version
`old + 1`. The runner carries a paused thread across by sending that update with the resume,
`Command(resume={interrupt_id: answer}, update=...)`: LangGraph applies it before the resumed
node runs, the interrupt id stays the one the reviewer answered, and no extra checkpoint or
branch is made. A thread with work left (no interrupt) continues with `Command(update=...)`.

History:
- 1: the first shape.
- 2: optional `tracking` (the carrier's lookup) and `history.recent` (refunds in the last 30
  days). Nothing reads them from a state that lacks them, so a version 1 state needs only its
  stamp; a reviewer's card shows no 30-day count for it.
- 3: `reason` (why the customer asks; the policy routes by it) and `reading` (what the intake
  read from their message). A thread paused before them was opened by order number for a late
  delivery: it carries on as one, with no reading.
- 4: `order_numbers` (a ticket covers one or more orders), `checks` and `charges` (the fan-outs'
  per-order results). A thread from before covers its one order: it gets `order_numbers` and
  runs the one-order path it started on, whose nodes and keys are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from refunds.flow.state import FLOW_VERSION
from refunds.policy import LATE_DELIVERY

Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def _to_2(values: dict[str, Any]) -> dict[str, Any]:
    return {}


def _to_3(values: dict[str, Any]) -> dict[str, Any]:
    return {"reason": LATE_DELIVERY, "reading": None}


def _to_4(values: dict[str, Any]) -> dict[str, Any]:
    return {"order_numbers": [values["order_number"]]} if values.get("order_number") else {}


UPGRADES: dict[int, Upgrade] = {1: _to_2, 2: _to_3, 3: _to_4}


def version_of(values: dict[str, Any] | None) -> int:
    return int((values or {}).get("flow_version") or 1)


def upgrade(values: dict[str, Any] | None, target: int | None = None) -> dict[str, Any]:
    """The update that carries a state to `target` (FLOW_VERSION); {} when it is there."""
    target = FLOW_VERSION if target is None else target
    state = dict(values or {})
    version = version_of(state)
    if version >= target:
        return {}
    update: dict[str, Any] = {}
    while version < target:
        step = UPGRADES[version](state) | {"flow_version": version + 1}
        # Reducer keys (lists) are appended by LangGraph: an upgrade that writes one adds to it.
        state |= step
        update |= step
        version += 1
    return update
