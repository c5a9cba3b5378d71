"""What the raw SQL says about statuses and waiting work, built from the models' choices: the one
home of both for hand-written statements (lease, runner, money, mail, models). DESIGN.md
invariant 11.

Every status a statement names comes from a `TextChoices` through a set below. Each set is a
decision about every status of its model; tests/test_queries.py fails when a status is added to
the choices until it is placed here, so no statement silently treats a new status the wrong way.

"Needs a worker" (TicketQuerySet.needing_worker in refunds/models.py, used by the sweep and
crashtest) is made of parts that the runner's raw SQL needs too: a lease that lapsed, work left,
a decision or fork recorded and not yet applied. The ORM builds them from the sets here; their
SQL is here too, and the test checks that each fragment picks the same rows as its ORM twin.
"""

from __future__ import annotations

import json
from typing import Any

from core.sql import literal, literals, now
from refunds.models import CHARGE_HOLDS_SQL, Charge, Decision, Email, Fork
from refunds.statuses import (
    CHARGE_HOLDS_BALANCE,
    DECISION_KNOWN,
    EMAIL_KNOWN,
    PROCESSOR_GAVE_BACK,
    TICKET_LEASABLE,
    TICKET_WORK_LEFT,
)
from refunds.statuses import TicketStatus as S

__all__ = [
    "CHARGE_HOLDS_BALANCE",
    "DECISION_KNOWN",
    "EMAIL_KNOWN",
    "TICKET_LEASABLE",
    "TICKET_WORK_LEFT",
    "literal",
    "literals",
]


def _chosen(decisions: dict) -> list[str]:
    return [status for status, yes in decisions.items() if yes]


def _left_out(decisions: dict) -> list[str]:
    return [status for status, yes in decisions.items() if not yes]


TICKET_NEW = literal(S.NEW)
TICKET_RUNNING = literal(S.RUNNING)
TICKET_FAILED = literal(S.FAILED)
TICKET_NOT_LEASABLE = literals(_left_out(TICKET_LEASABLE))
TICKET_WORK_LEFT_SQL = literals(_chosen(TICKET_WORK_LEFT))
CHARGE_PENDING = literal(Charge.Status.PENDING)
CHARGE_SUCCEEDED = literal(Charge.Status.SUCCEEDED)
CHARGE_REFUSED = literal(Charge.Status.REFUSED)
CHARGE_HOLDING = literals(_chosen(CHARGE_HOLDS_BALANCE))
CHARGE_GAVE_BACK = literals(sorted(PROCESSOR_GAVE_BACK))  # processor statuses
# A ledger row `c` that holds its order's balance: paid or under way, and not given back by the
# processor (a refund it failed or canceled). The ledger's checks, the order's and each line's.
CHARGE_HOLDS = CHARGE_HOLDS_SQL  # defined beside Order.facts, which reads it too
# An outside refund `x` (refunds_outsiderefund: made at the processor, not by the desk) that holds
# its order's balance: any the processor has not failed or canceled. OutsideRefund.objects
# .holding_balance() is the ORM's twin.
OUTSIDE_HOLDS = f"x.status NOT IN {CHARGE_GAVE_BACK}"
EMAIL_PENDING = literal(Email.Status.PENDING)
EMAIL_SENDING = literal(Email.Status.SENDING)
EMAIL_SENT = literal(Email.Status.SENT)
APPROVE = literal(Decision.Answer.APPROVE)


# --- "needs a worker", in parts ----------------------------------------------------------------
def unapplied(alias: str) -> str:
    """A decision or fork row (by its alias) recorded and neither applied nor refused: the thread
    still owes it a run. The ORM's twin: `Decision.objects.unapplied()`, `Fork.objects...`."""
    return f"{alias}.applied_at IS NULL AND {alias}.refused_reason = ''"


def due(alias: str) -> str:
    """A decision (by its alias) past its undo grace: `Decision.objects.due()` in SQL."""
    return f"({alias}.apply_after IS NULL OR {alias}.apply_after <= {now()})"


def open_decisions(ticket: str) -> str:
    """The ticket's decisions recorded and not yet applied (an SQL expression for its id), as
    one JSON array of [id, interrupt_id, answer, reason, reviewer's username, orders,
    sent_back]: the lease grant returns them with the lease, so a resume needs no read of its
    own. Read it with `read_open_decisions`. A decision still in its undo grace is read too: a
    read is no guard against an Undo, so the grace is held in one place, the runner's
    compare-and-set as it takes the decision (runner._taken)."""
    from django.contrib.auth import get_user_model

    from core.sql import is_postgres

    users = get_user_model()._meta.db_table
    columns = "d.id, d.interrupt_id, d.answer, d.reason, COALESCE(u.username, '')"
    rows = (  # a customer's reply has no reviewer
        f"FROM {Decision._meta.db_table} d LEFT JOIN {users} u ON u.id = d.reviewer_id "
        f"WHERE d.ticket_id = {ticket} AND {unapplied('d')}"
    )
    if is_postgres():
        built = f"json_build_array({columns}, d.orders, d.sent_back)"
        return f"(SELECT coalesce(json_agg({built}), '[]') {rows})"
    return f"(SELECT json_group_array(json_array({columns}, json(d.orders), d.sent_back)) {rows})"


def read_open_decisions(value: Any) -> list[tuple]:
    """What `open_decisions` read: one tuple per decision, oldest first."""
    rows = json.loads(value) if isinstance(value, str) else (value or [])
    return sorted((tuple(row) for row in rows), key=lambda row: row[0])


def decision_waiting(ticket: str) -> str:
    """A decision for the ticket (an SQL expression for its id) waits to be applied: past its
    grace, so that no sweep or release wakes a worker for one it may not take yet."""
    table = Decision._meta.db_table
    return (
        f"EXISTS (SELECT 1 FROM {table} d WHERE d.ticket_id = {ticket} AND {unapplied('d')} "
        f"AND {due('d')})"
    )


def fork_waiting(ticket: str) -> str:
    """An admin's fork of the ticket waits to be applied."""
    table = Fork._meta.db_table
    return f"EXISTS (SELECT 1 FROM {table} f WHERE f.ticket_id = {ticket} AND {unapplied('f')})"


def answer_waiting(ticket: str) -> str:
    """A decision or a fork waits: TicketQuerySet.answer_waiting() in SQL."""
    return f"({decision_waiting(ticket)} OR {fork_waiting(ticket)})"


def refund_failed_waiting(ticket: str) -> str:
    """A refund of the ticket (an SQL expression for its id) that the processor failed after
    accepting it, not yet handed back to a manager: the thread owes it a run, even though the
    ticket reads refunded. Charge.objects.failed_not_handed_back() is the ORM's twin."""
    return (
        f"EXISTS (SELECT 1 FROM refunds_charge c WHERE c.ticket_id = {ticket} "
        f"AND c.status = {CHARGE_SUCCEEDED} AND c.processor_status IN {CHARGE_GAVE_BACK} "
        "AND c.handed_back_at IS NULL)"
    )


def lease_lapsed(now: str, ticket: str = "refunds_ticket") -> str:
    """Nobody holds the ticket's lease: never taken, or expired by `now` (the database's clock,
    core.sql.now()). TicketQuerySet.leasable() in SQL."""
    return f"({ticket}.lease_expires_at IS NULL OR {ticket}.lease_expires_at < {now})"
