"""What the raw SQL says of statuses and waiting work, for statements that must stay one: every
status a literal of a `TextChoices`, every rule the ORM's through `rule` (DESIGN.md inv. 11)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, models
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
    """The queryset's condition as SQL and its parameters, on its model's table by name."""
    query = queryset.query
    condition, params = query.get_compiler(connection=connection).compile(query.where)
    return condition, list(params)


_COMPILED: dict[tuple[str, str], tuple[str, tuple[Any, ...]]] = {}


def named_rule(model: type[models.Model], name: str) -> tuple[str, list[Any]]:
    """`rule` of `model.objects.<name>()`, compiled once per process and database: such a rule
    is built from code alone (its times are the database's Now()), so it never changes. The
    worker's every grant and release would otherwise compile four of them anew."""
    key = (connection.vendor, f"{model._meta.label}.{name}")
    if key not in _COMPILED:
        condition, params = rule(getattr(model._default_manager, name)())
        _COMPILED[key] = condition, tuple(params)
    compiled, values = _COMPILED[key]
    return compiled, list(values)


def open_decisions(ticket: str) -> tuple[str, list[Any]]:
    """The ticket's unapplied decisions as one JSON array, returned with the lease grant. Those in
    their undo grace too: the grace is held in one place, runner._taken's compare-and-set."""
    d = Decision._meta.db_table
    users = get_user_model()._meta.db_table
    unapplied, params = named_rule(Decision, "unapplied")
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
