"""The Ticket row mirrors its thread: status, next nodes, the pending interrupt and its payload.
The checkpointer is the source of truth; the mirror is what the queue, the API and the sweep read,
rebuilt from a snapshot and written only while the writer's lease epoch holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from django.db.models import Case, F, Value, When
from django.utils import timezone
from langgraph.types import StateSnapshot

from refunds import persistence
from refunds.flow.state import RefundState
from refunds.models import Ticket


@dataclass(frozen=True)
class Outcome:
    """Where a thread stands after a run, read from the run's own stream events; the same
    attributes as LangGraph's StateSnapshot, so the mirror is built the same way from either."""

    values: dict
    next: tuple[str, ...]
    tasks: tuple
    interrupts: tuple
    metadata: dict | None


class RunEvents:
    """Reads a run's stream (modes "updates" and "checkpoints") as it goes: the last checkpoint
    and the interrupts the run stopped on are where the thread stands, with no read of the
    checkpointer after the run."""

    MODES = ["updates", "checkpoints"]

    def __init__(self) -> None:
        self.last: dict | None = None
        self.interrupts: tuple = ()

    def see(self, mode: str, chunk: Any) -> list[str]:
        """Take one stream item; return the nodes it says finished."""
        if mode == "checkpoints":
            self.last = chunk
            return []
        if "__interrupt__" in chunk:
            self.interrupts = tuple(chunk["__interrupt__"])
            return []
        return list(chunk)

    def outcome(self) -> Outcome | None:
        if self.last is None:
            return None
        return Outcome(
            values=self.last["values"],
            next=tuple(self.last["next"]),
            tasks=tuple(self.last["tasks"]),
            interrupts=self.interrupts,
            metadata=self.last["metadata"],
        )


def has_work(snap: StateSnapshot | Outcome) -> bool:
    # After a hard kill `next` alone can be empty although the run is unfinished: read tasks too.
    return bool(snap.next or snap.tasks)


def never_started(snap: StateSnapshot | Outcome) -> bool:
    return snap.metadata is None


def fields(snap: StateSnapshot | Outcome) -> dict[str, Any]:
    # The checkpoint holds what the graph's nodes wrote; LangGraph hands it back untyped.
    values = cast(RefundState, snap.values or {})
    result: dict[str, Any] = {
        "nodes_run": list(values.get("trail", [])),
        "next_nodes": list(snap.next),
        "amount_cents": values.get("amount_cents"),
        "pending_interrupt_id": "",
        "pending_payload": None,
        "outcome_reason": values.get("outcome_reason", ""),
    }
    if values.get("flow_version"):
        result["flow_version"] = values["flow_version"]
    if snap.interrupts:
        pending = snap.interrupts[0]
        # One thread, five kinds of wait: a reviewer's review, the customer's reply to it, that
        # reply after the ticket was closed for want of one, the goods of a refund on return,
        # or the customer's choice of store credit.
        waits_on = {
            "customer": Ticket.Status.AWAITING_CUSTOMER,
            "closed": Ticket.Status.CLOSED,
            "return": Ticket.Status.AWAITING_RETURN,
            "choice": Ticket.Status.AWAITING_CUSTOMER,  # store credit or money
        }
        if isinstance(pending.value.get("amount_cents"), int):
            # A waiting review's amount is what it asks (the queue's "Approve $X"), not what the
            # run paid before: 0 after a refused charge or a refund that failed later.
            result["amount_cents"] = pending.value["amount_cents"]
        result |= {
            "status": waits_on.get(pending.value.get("kind"), Ticket.Status.AWAITING_REVIEW),
            "pending_interrupt_id": pending.id,
            "pending_payload": pending.value,
            "required_role": pending.value.get("required_role", ""),
        }
    elif never_started(snap):
        result["status"] = Ticket.Status.NEW
    elif has_work(snap):
        result["status"] = Ticket.Status.RUNNING
    else:
        result["status"] = values.get("outcome", Ticket.Status.FAILED)
    return result


def rebuild(ticket: Ticket, *, epoch: int | None = None) -> dict[str, Any]:
    """Rebuild the Ticket row from the checkpoint; with an epoch, only while it holds."""
    result = fields(persistence.snapshot(ticket.thread_id))
    qs = Ticket.objects.filter(pk=ticket.pk)
    if epoch is not None:
        qs = qs.filter(lease_epoch=epoch)
    now = timezone.now()
    clock = {}
    if result["pending_interrupt_id"]:
        # A rebuilt review keeps its age if the same interrupt still waits.
        clock["review_since"] = Case(
            When(
                pending_interrupt_id=result["pending_interrupt_id"],
                review_since__isnull=False,
                then=F("review_since"),
            ),
            default=Value(now),
        )
    qs.update(**result, **clock, updated_at=now)
    return result
