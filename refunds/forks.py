"""Forks: where one may start, and applying an admin's fork (runner.py, under the lease)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from langgraph.types import StateSnapshot

from refunds import lease as leases
from refunds import money, persistence, policy
from refunds.flow import versions
from refunds.flow.state import FLOW_VERSION
from refunds.flow.words import dollars
from refunds.models import Fork
from refunds.persistence import graph, snapshot

_FORKABLE_AT = (("triage",), ("approve",))  # checkpoints a fork may start from: before the charge


def is_forkable(snap: StateSnapshot) -> bool:
    """Before the charge, so triage runs again with the corrected amount."""
    return snap.next in _FORKABLE_AT and versions.version_of(snap.values) == FLOW_VERSION


def fork_base(thread_id: str, checkpoint_id: str = "") -> StateSnapshot | None:
    """The named checkpoint if forkable, else the latest forkable one."""
    for snap in persistence.history(thread_id):
        if is_forkable(snap) and checkpoint_id in (
            "",
            snap.config["configurable"]["checkpoint_id"],
        ):
            return snap
    return None


def apply_forks(lease: leases.Lease, forks: list[Fork]) -> None:
    """A new checkpoint branched from the base, with the corrected amount; fenced."""
    for fork in forks:
        one = leases.fenced(Fork.objects.filter(pk=fork.pk), lease)
        current = snapshot(lease.thread_id)
        if (current.values or {}).get("fork_id") == fork.pk:  # a crash after update_state
            one.update(applied_at=timezone.now())
            continue
        # Under durability "exit" the first leg keeps only the checkpoint paused at the review.
        base = fork_base(lease.thread_id, fork.from_checkpoint_id)
        refusal = ""
        if money.money_moved(lease.row_id) is not None:
            refusal = "Money moved before the fork could be applied; nothing was changed."
        elif base is None and fork.from_checkpoint_id:
            refusal = "That checkpoint is not one before the charge (or was pruned)."
        elif base is None:
            refusal = "The thread never reached triage, so it has no amount to correct."
        if refusal or base is None:  # base is None only with a refusal said above
            one.update(refused_reason=refusal)
            continue
        previous = (current.values or {}).get("amount_cents")
        # The base whole, lists aside (they append): update_state leaves out the pending writes
        # that hold a carry made while paused.
        values = {k: v for k, v in base.values.items() if k not in ("flags", "notes", "trail")}
        (number,) = values["order_numbers"]
        update: dict[str, Any] = values | {
            "checks": {number: _forked(values["checks"][number], fork.amount_cents)},
            "amount_cents": fork.amount_cents,
            # Over every branch, so each fork's notify email has a key of its own.
            "forks": max(base.values.get("forks", 0), (current.values or {}).get("forks", 0)) + 1,
            "fork_id": fork.pk,
            "payment_error": "",
            "notes": [
                f"Forked by {fork.by.username}: amount set to {dollars(fork.amount_cents)}"
                f" ({fork.reason})."
            ],
        }
        config = {"configurable": {**base.config["configurable"], "fence": lease.epoch}}
        # As gather (update_state cannot replay triage's Command): triage re-decides who reviews
        # the corrected amount; an "edit" answer would keep the old reviewer's role.
        graph().update_state(config, update, as_node="gather")
        one.update(
            applied_at=timezone.now(),
            from_checkpoint_id=base.config["configurable"]["checkpoint_id"],
            previous_amount_cents=previous,
        )


def _forked(check: dict[str, Any], amount_cents: int) -> dict[str, Any]:
    """The order's check with the admin's corrected amount, and the parts that refund it."""
    proposal = check.get("parts") or []
    parts = policy.parts_for_amount(check["order"], proposal, amount_cents)
    return check | {"amount_cents": amount_cents, "parts": parts}
