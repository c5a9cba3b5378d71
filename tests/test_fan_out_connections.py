"""LangGraph runs a step of several tasks (a ticket's per-order checks and charges, sent with
`Send`) on threads of its own, and each task that touches the ORM opens a Django connection on
its thread. Those are closed when the task ends, as a worker closes its own between tasks: an
advance leaves no connection open behind it (issue 28)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from django.db.backends.signals import connection_created

from core import sql
from refunds import enqueue, runner, services
from refunds.models import Ticket
from tests.conftest import make_order, wait_for


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # the test advances itself


@pytest.fixture
def opened_elsewhere() -> Iterator[list]:
    """The database connections opened on threads other than this test's, held here so that one
    left open stays open (not closed by the garbage collector) until the test looks; on
    PostgreSQL with the process id of its server backend."""
    here = threading.get_ident()
    opened: list = []

    def seen(sender, connection, **kwargs) -> None:
        if threading.get_ident() != here:
            raw = connection.connection
            opened.append((raw, raw.info.backend_pid if connection.vendor == "postgresql" else 0))

    connection_created.connect(seen, weak=False, dispatch_uid="opened_elsewhere")
    yield opened
    connection_created.disconnect(dispatch_uid="opened_elsewhere")
    for raw, _ in opened:
        raw.close()


def is_open(raw) -> bool:
    if isinstance(raw, psycopg.Connection):
        return not raw.closed
    try:
        raw.total_changes  # noqa: B018 - raises once the connection is closed
    except sqlite3.ProgrammingError:
        return False
    return True


def backends_of(opened: list) -> int:
    """How many of these connections' server processes PostgreSQL still lists."""
    pids = [pid for _, pid in opened]
    row = sql.fetchone("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids])
    return row[0] if row else 0


def test_a_three_order_tickets_fan_out_leaves_no_connection_open(
    transactional_db, agent, opened_elsewhere
):
    for number, late, fee in (("1042", 4, 699), ("1044", 3, 1250), ("1043", -1, 499)):
        make_order(number, late=late, fee_cents=fee, name="Iris Lund")
    ticket = services.ticket_open(order_numbers=["1042", "1044", "1043"])
    assert runner.advance(ticket.pk) == "awaiting_review"
    checks = len(opened_elsewhere)
    assert checks, "the per-order checks ran on LangGraph's threads and read the database"

    ticket = Ticket.objects.get(pk=ticket.pk)
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    assert len(opened_elsewhere) > checks, "the per-order charges ran on LangGraph's threads"

    assert [raw for raw, _ in opened_elsewhere if is_open(raw)] == []
    if connection.vendor == "postgresql":
        wait_for(lambda: backends_of(opened_elsewhere) == 0, what="their backends to end")
