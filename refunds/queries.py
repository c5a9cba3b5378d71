"""What the raw SQL says about statuses and waiting work, for the statements that must stay one
(the lease grant and release, the outbox's claim). DESIGN.md invariant 11.

Every status a statement names is a literal of a `TextChoices` (the sets in refunds/statuses.py
decide about every status); a rule about rows is a queryset method in refunds/models/, whose SQL
a statement takes from `rule`, never a copy written by hand.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import QuerySet

from core.sql import is_postgres, literal
from refunds.models import Decision, Email
from refunds.statuses import TicketStatus as S

TICKET_NEW = literal(S.NEW)
TICKET_RUNNING = literal(S.RUNNING)
EMAIL_PENDING = literal(Email.Status.PENDING)
EMAIL_SENDING = literal(Email.Status.SENDING)
EMAIL_SENT = literal(Email.Status.SENT)
APPROVE = literal(Decision.Answer.APPROVE)


def rule(queryset: QuerySet) -> tuple[str, list[Any]]:
    """The queryset's condition as SQL and its parameters, on its model's table by name (a
    ticket's: "refunds_ticket"."id"): the ORM's rule inside a statement that must stay one."""
    query = queryset.query
    condition, params = query.get_compiler(connection=connection).compile(query.where)
    return condition, list(params)


def open_decisions(ticket: str) -> tuple[str, list[Any]]:
    """The ticket's decisions recorded and not yet applied (`ticket`: an SQL expression for its
    id), as one JSON array of [id, interrupt_id, answer, reason, reviewer's username, orders,
    sent_back]: the lease grant returns them with the lease, so a resume needs no read of its
    own. Read it with `read_open_decisions`. A decision still in its undo grace is read too: a
    read is no guard against an Undo, so the grace is held in one place, the runner's
    compare-and-set as it takes the decision (runner._taken)."""
    d = Decision._meta.db_table
    users = get_user_model()._meta.db_table
    unapplied, params = rule(Decision.objects.unapplied())
    columns = f"{d}.id, {d}.interrupt_id, {d}.answer, {d}.reason, COALESCE(u.username, '')"
    rows = (  # a customer's reply has no reviewer
        f"FROM {d} LEFT JOIN {users} u ON u.id = {d}.reviewer_id "
        f"WHERE {d}.ticket_id = {ticket} AND {unapplied}"
    )
    if is_postgres():
        built = f"json_build_array({columns}, {d}.orders, {d}.sent_back)"
        return f"(SELECT coalesce(json_agg({built}), '[]') {rows})", params
    built = f"json_array({columns}, json({d}.orders), {d}.sent_back)"
    return f"(SELECT json_group_array({built}) {rows})", params


def read_open_decisions(value: Any) -> list[tuple]:
    """What `open_decisions` read: one tuple per decision, oldest first."""
    rows = json.loads(value) if isinstance(value, str) else (value or [])
    return sorted((tuple(row) for row in rows), key=lambda row: row[0])
