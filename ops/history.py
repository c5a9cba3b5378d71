"""A thread's checkpoint history through the graph's public `get_state_history`: what ran, what
changed (in words), what it waits on, who caused it; branches told apart by `parent_config`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone
from langgraph.types import Send, StateSnapshot

from core.clock import day_words
from refunds import forks, persistence, policy
from refunds.flow import nodes
from refunds.flow.words import days, dollars, node_words
from refunds.models import Decision, Fork, Role, Ticket
from refunds.persistence import storage

PAGE_SIZE = 20
LABELS = {
    "amount_cents": "Refund amount",
    "balance_cents": "Refundable balance",
    "late_by_days": "Late by",
    "required_role": "Reviewed by",
    "receipt": "Receipt",
    "payment_error": "Charge error",
    "email_delivered": "Email delivered",
    "outcome": "Outcome",
    "outcome_reason": "Why",
    "order_numbers": "Orders",
    "note": "Customer's note",
    "reason": "Reason",
}
# Said elsewhere on the entry or the page, or for admins only (the technical details).
HIDDEN = {"flow_version", "forks", "tracking", "order_number", "ticket_key", "fork_id", "trail"}
HIDDEN |= {"notes", "flags", "history", "checks", "charges", "asking", "replies", "reading"}


@dataclass
class Change:
    label: str
    before: str
    after: str


@dataclass
class Lane:
    """One order of a ticket of several, now: how far it has come."""

    number: str
    words: list[str]
    state: str  # "done", "now", "declined", "refused", "waiting"


@dataclass
class Entry:
    checkpoint_id: str
    step: int | None
    at: datetime | None
    ran: list[str]
    changes: list[Change]
    added_notes: list[str]
    added_flags: list[str]
    waiting: list[str]
    errors: list[str]
    interrupts: list[dict[str, Any]]
    decision: Decision | None
    fork: Fork | None
    branch: int
    current_branch: bool
    branched_from_step: int | None
    fork_point: bool
    is_head: bool
    forkable: bool


def _id(config: Any) -> str | None:
    return (config or {}).get("configurable", {}).get("checkpoint_id")


@dataclass
class Branches:
    number: dict[str, int]  # checkpoint id -> branch number (1: the original)
    current: int
    children: Counter[str]
    head: str | None


def branches(snaps: list[StateSnapshot]) -> Branches:
    """Each checkpoint's branch: one per leaf, the oldest leaf's is branch 1 (the original)."""
    parent = {_id(s.config) or "": _id(s.parent_config) for s in snaps}
    children = Counter(p for p in parent.values() if p)
    number: dict[str, int] = {}
    for n, leaf in enumerate(sorted(c for c in parent if c not in children), start=1):
        node: str | None = leaf
        while node is not None and node not in number and node in parent:
            number[node] = n
            node = parent[node]
    head = max(parent) if parent else None
    current = number.get(head, 1) if head else 1
    return Branches(number=number, current=current, children=children, head=head)


def _when(snapshot: StateSnapshot) -> datetime | None:
    if not snapshot.created_at:
        return None
    return timezone.localtime(datetime.fromisoformat(snapshot.created_at))


def _show(key: str, value: Any) -> str | None:
    """A state value in words; None for a structure with no words here (never its repr)."""
    if value is None or value == "":
        return "—"
    if key.endswith("_cents"):
        return dollars(value)
    if key == "late_by_days":
        return days(value)
    if key == "reason":
        return policy.REASONS.get(value, str(value))
    if key == "required_role" and value in Role.values:
        return Role(value).label.lower() + "s"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "order_numbers":
        return ", ".join(value)
    if isinstance(value, dict | list | tuple | set):
        return None
    return str(value)


def describe_order(order: dict) -> str:
    promised, delivered = (day_words(str(order[k])) for k in ("promised_on", "delivered_on"))
    return (
        f"Order {order['number']} for {order['customer_name']} ({order['customer_email']}): "
        f"shipping fee {dollars(order['fee_cents'])}, promised {promised}, delivered {delivered}"
    )


def diff(before: dict, after: dict) -> tuple[list[Change], list[str], list[str]]:
    """One row per key whose value changed, old -> new in words; and the notes and flags added."""
    changes = []
    for key, value in after.items():
        if key in HIDDEN or before.get(key) == value:
            continue
        if key == "order":
            changes.append(Change("Order", "—", describe_order(value)))
        elif key == "decision":
            changes.append(Change(*answer_words(value)))
        elif (now := _show(key, value)) and (was := _show(key, before.get(key))) and was != now:
            changes.append(Change(LABELS.get(key, key.replace("_", " ")), was, now))
    return changes, _added(before, after, "notes"), _added(before, after, "flags")


def _quote(text: str | None) -> str:
    return f"“{text}”" if text else ""


def answer_words(answer: dict) -> tuple[str, str, str]:
    """The thread's last answer as a row of the diff (label, before, after)."""
    kind, who = answer.get("answer"), answer.get("reviewer") or "a reviewer"
    if kind == "ask":
        return "Question to the customer", "—", f"{_quote(answer.get('reason'))} asked by {who}"
    if kind == "reply":
        return "The customer's reply", "—", _quote(answer.get("reason")) or "(no words)"
    if kind == "no_reply":
        return "The customer's reply", "—", "none came: the wait's timer ran out"
    if len(answer.get("orders") or {}) > 1:  # each order's own, not the shared reason
        return "Decision", "—", f"answered per order by {who}"
    verb = "approved" if kind == "approve" else "rejected"
    reason = f": {_quote(answer['reason'])}" if answer.get("reason") else ""
    return "Decision", "—", f"{verb} by {who}{reason}"


def _added(before: dict, after: dict, key: str) -> list[str]:
    old, new = list(before.get(key) or []), list(after.get(key) or [])
    return new[len(old) :] if new[: len(old)] == old else new


def _ran(snapshot, parent, before: dict, after: dict) -> list[str]:
    source = (snapshot.metadata or {}).get("source")
    if source == "input":
        return ["Ticket opened"]
    if source == "update":
        if after.get("fork_id") and after.get("fork_id") != before.get("fork_id"):
            return ["An admin forked the thread with a correction"]
        return ["An admin updated the state"]
    trail = _added(before, after, "trail")
    if trail:
        return [node_words(n) for n in trail]
    if parent is not None and parent.next:
        return [node_words(n) for n in parent.next]
    return ["Started" if (snapshot.metadata or {}).get("step") == -1 else "—"]


def _check_words(check: dict) -> str:
    if not check.get("refundable", True):
        return f"declined by policy: {check.get('declined_reason') or 'not refundable'}"
    late = check.get("late_by_days")
    words = f"checked: {dollars(check.get('amount_cents'))} to refund"
    if late:
        words += f", late by {days(late)}"
    if check.get("flags"):
        words += f" (flagged: {'; '.join(check['flags'])})"
    return words


def _answer_words(answer: dict) -> str:
    if answer.get("answer") == "approve":
        return f"approved {dollars(answer.get('amount_cents'))}"
    return "rejected" + (f": {_quote(answer.get('reason'))}" if answer.get("reason") else "")


def _charge_words(charge: dict) -> str:
    if charge.get("receipt"):
        return f"charged {dollars(charge.get('amount_cents'))}, receipt {charge['receipt']}"
    if charge.get("error"):
        return f"charge refused: {charge['error']}"
    return "charge to be asked again"


# A fan-out's tasks come in its Sends' order: its router run again on the checkpoint names them.
FAN_OUTS = {"check_order": nodes.fan_out, "charge_order": nodes.send_charges}


def _task_numbers(snapshot) -> list[str]:
    """The order each of a checkpoint's tasks runs for ('' for a step of the whole ticket)."""
    made: dict[str, list[str]] = {}
    for name, router in FAN_OUTS.items():
        if any(t.name == name for t in snapshot.tasks):
            values: Any = snapshot.values or {}
            routed = router(values)
            args = (
                [s.arg for s in routed if isinstance(s, Send)] if isinstance(routed, list) else []
            )
            made[name] = [str(a.get("number") or a.get("order_number") or "") for a in args]
    seen: Counter[str] = Counter()
    out = []
    for task in snapshot.tasks:
        numbers, index = made.get(task.name, []), seen[task.name]
        seen[task.name] += 1
        out.append(numbers[index] if index < len(numbers) else "")
    return out


def task_words(snapshot) -> list[str]:
    """What a checkpoint waits on: a per-order task named with its order."""
    numbers = _task_numbers(snapshot)
    if not any(numbers):
        return [node_words(n) for n in snapshot.next]
    return [_task_name(t, n) for t, n in zip(snapshot.tasks, numbers, strict=True)]


def _task_name(task, number: str) -> str:
    return node_words(f"{task.name}:{number}" if number else task.name)


def order_lanes(ticket: Ticket) -> list[Lane]:
    """Now, one lane per order of a ticket of several: how far each has come, in words."""
    snap = persistence.snapshot(ticket.thread_id)
    values = snap.values or {}
    numbers = values.get("order_numbers") or []
    if len(numbers) < 2:
        return []
    checks, charges = values.get("checks") or {}, values.get("charges") or {}
    running = set(zip((t.name for t in snap.tasks), _task_numbers(snap), strict=True))
    out = []
    for number in numbers:
        check, charge = checks.get(number) or {}, charges.get(number) or {}
        answer = check.get("answer") or {}
        if not check:
            said = "being checked" if ("check_order", number) in running else "not checked yet"
            out.append(Lane(number, [said], "waiting"))
            continue
        words = [_check_words(check)]
        if not check.get("refundable", True):
            out.append(Lane(number, words, "declined"))
            continue
        state = "now"
        if answer:
            words.append(_answer_words(answer))
            if answer.get("answer") == "reject":
                state = "done"
        elif snap.interrupts:
            words.append("waiting on the review")
        if ("charge_order", number) in running:
            words.append("being charged")
        elif charge.get("receipt") or charge.get("error"):
            words.append(_charge_words(charge))
            state = "done" if charge.get("receipt") else "refused"
        out.append(Lane(number, words, state))
    return out


# A wait on the customer (refunds/flow/state.py CustomerWait) rather than on a reviewer.
CUSTOMER_WAITS = {"customer", "closed"}


def _interrupts(snapshot, answers: dict[str, Decision]) -> list[dict[str, Any]]:
    out = []
    for interrupt in snapshot.interrupts or ():
        value = interrupt.value if isinstance(interrupt.value, dict) else {}
        on_customer = value.get("kind") in CUSTOMER_WAITS
        out.append(
            {
                "id": interrupt.id,
                "description": value.get("description", ""),
                "role": "customer" if on_customer else value.get("required_role", ""),
                "amount_cents": value.get("amount_cents"),
                "answer": answers.get(interrupt.id),
            }
        )
    return out


def _caused(key: str, before: dict, after: dict, rows: dict[int, Any]) -> Any:
    """The Decision or Fork that this checkpoint's state names for the first time, if any."""
    now = after.get(key) if key == "fork_id" else (after.get(key) or {}).get("decision_id")
    was = before.get(key) if key == "fork_id" else (before.get(key) or {}).get("decision_id")
    return rows.get(now) if now is not None and now != was else None


def _entry(snap: StateSnapshot, parent: StateSnapshot | None, tree: Branches, rows: dict) -> Entry:
    cid = _id(snap.config) or ""
    before, after = dict(parent.values) if parent else {}, dict(snap.values or {})
    changes, notes, flags = diff(before, after)
    branch = tree.number.get(cid, 1)
    parent_branch = tree.number.get(_id(parent.config) or "") if parent else None
    numbers = _task_numbers(snap)
    return Entry(
        checkpoint_id=cid,
        step=(snap.metadata or {}).get("step"),
        at=_when(snap),
        ran=_ran(snap, parent, before, after),
        changes=changes,
        added_notes=notes,
        added_flags=flags,
        waiting=task_words(snap),
        errors=[
            f"{_task_name(t, n)}: {t.error}"
            for t, n in zip(snap.tasks, numbers, strict=True)
            if t.error
        ],
        interrupts=_interrupts(snap, rows["answers"]),
        decision=_caused("decision", before, after, rows["decisions"]),
        fork=_caused("fork_id", before, after, rows["forks"]),
        branch=branch,
        current_branch=branch == tree.current,
        branched_from_step=(parent.metadata or {}).get("step")
        if parent and parent_branch is not None and parent_branch != branch
        else None,
        fork_point=tree.children[cid] > 1,
        is_head=cid == tree.head,
        forkable=forks.is_forkable(snap),
    )


def page(ticket: Ticket, *, before: str | None = None) -> dict[str, Any]:
    """One page of the history, newest first, below checkpoint `before`. The whole history is
    read (every branch, to number them); only the page is put in words."""
    snaps = persistence.history(ticket.thread_id)
    by_id = {_id(s.config): s for s in snaps}
    tree = branches(snaps)
    older = [s for s in snaps if before is None or (_id(s.config) or "") < before]
    decisions = {d.pk: d for d in ticket.decisions.select_related("reviewer")}
    rows = {
        "decisions": decisions,
        "answers": {d.interrupt_id: d for d in decisions.values()},
        "forks": {f.pk: f for f in ticket.forks.select_related("by")},
    }
    entries = [_entry(s, by_id.get(_id(s.parent_config)), tree, rows) for s in older[:PAGE_SIZE]]
    more = len(older) > PAGE_SIZE
    return {
        "entries": entries,
        "more": more,
        "next_before": entries[-1].checkpoint_id if more else None,
        "total": len(snaps),
        "branch_count": max(tree.number.values(), default=0),
        "current_branch": tree.current,
        "bytes": storage.thread_bytes(ticket.thread_id),
    }


def path(ticket: Ticket) -> tuple[list[str], list[str]]:
    """The nodes the thread's current branch ran, and where it stands now."""
    snap = persistence.snapshot(ticket.thread_id)
    return list((snap.values or {}).get("trail", [])), list(snap.next)
