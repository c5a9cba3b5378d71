"""PostgreSQL deployment: checkpoints beside the app data, tables created once at deploy."""

import os
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from refunds import persistence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
on_postgres = pytest.mark.skipif(
    not settings.IS_POSTGRES, reason="needs DATABASE_URL=postgres://... (PostgreSQL)"
)


def tables() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.table_names(cursor))


@on_postgres
def test_migrate_created_the_checkpoint_and_store_tables_in_the_app_database(db):
    assert {
        "checkpoints",
        "checkpoint_blobs",
        "checkpoint_writes",
        "checkpoint_migrations",
        "store",
        "store_migrations",
    } <= tables()


@on_postgres
def test_checkpoints_default_to_the_app_database(db):
    from psycopg.conninfo import conninfo_to_dict

    assert not settings.CHECKPOINT_URL
    assert (
        conninfo_to_dict(persistence.checkpoint_url())["dbname"] == connection.settings_dict["NAME"]
    )


@on_postgres
def test_the_checkpointer_uses_a_connection_pool(db):
    from psycopg_pool import ConnectionPool

    saver, store = persistence.checkpointer(), persistence.store()
    assert isinstance(saver.conn, ConnectionPool) and store.conn is saver.conn


@on_postgres
def test_the_app_sends_parameters_apart_from_its_sql_and_prepares_nothing(db):
    """Server-side binding (docs/benchmarks.md: the advance spends less in Python quoting), with
    unnamed statements only, which any pooler in transaction mode passes through."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::int + 1", [41])
        assert cursor.fetchone() == (42,)
        assert type(cursor.cursor).__name__ == "ServerBindingCursor"
    assert connection.connection.prepare_threshold is None
    with connection.cursor() as cursor:
        for _ in range(10):  # past psycopg's usual threshold of 5: still nothing named
            cursor.execute("SELECT count(*) FROM refunds_ticket WHERE id > %s", [0])
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)


@on_postgres
def test_setup_checkpoints_can_run_again_at_the_next_deploy(db, capsys):
    call_command("setup_checkpoints")
    call_command("setup_checkpoints")
    assert "ready in PostgreSQL" in capsys.readouterr().out


def test_workers_never_create_checkpoint_tables():
    # Setup raced by workers starting together fails (measured); only migrate runs it.
    callers = subprocess.run(
        [
            "grep",
            "-rln",
            "--include=*.py",
            "setup_persistence\\|\\.setup()",
            "refunds",
            "reviews",
            "config",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert sorted(callers) == [
        "refunds/management/commands/setup_checkpoints.py",
        "refunds/persistence/__init__.py",
        "refunds/persistence/sqlite.py",
        "refunds/signals.py",
    ]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DATABASE_URL": "mysql://x@h/db"}, "DATABASE_URL must start with one of"),
        ({"CHECKPOINT_URL": "redis://h/0"}, "CHECKPOINT_URL must start with one of"),
        ({"CELERY_BROKER_URL": "sqs://"}, "CELERY_BROKER_URL must start with one of"),
        (
            {"CHECKPOINT_POOL_SIZE": "0"},
            "CHECKPOINT_POOL_SIZE='0': Must be greater than or equal to 1.",
        ),
    ],
)
def test_a_bad_scale_out_setting_stops_the_process_with_its_name(env, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "REFUNDS_DATA_DIR": str(tmp_path),
            **env,
        },
    )
    assert result.returncode != 0 and message in result.stderr, result.stderr[-2000:]


@on_postgres
def test_a_pooled_connection_the_server_dropped_is_replaced_before_a_run_gets_it(db):
    """The pool checks each connection it hands out without a round trip
    (refunds/persistence/__init__.py `_check_without_round_trip`); a connection the server
    terminated while it sat in the pool is still caught and replaced, so the next checkpoint read
    succeeds."""
    saver = persistence.checkpointer()
    pool = saver.conn
    with pool.connection() as conn:
        pid = conn.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the goodbye reaches the pooled socket
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            if cursor.fetchone()[0] == 0:
                break
        time.sleep(0.02)
    for _ in range(pool.get_stats()["pool_size"] + 1):  # every connection the pool holds
        assert saver.get_tuple({"configurable": {"thread_id": "none", "checkpoint_ns": ""}}) is None
    with pool.connection() as conn:
        assert conn.info.backend_pid != pid


def sessions_opened() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


@on_postgres
@pytest.mark.slow
def test_a_worker_keeps_its_database_connection_from_task_to_task(workers, admin_user):
    """Celery's Django fixup would open a new connection for every task (CELERY_DB_REUSE_MAX);
    a worker that ran ten advances opened a handful of sessions, not one per task, and still
    goes on after the server dropped its connections (Django's health check before reuse)."""
    from datetime import date, timedelta

    from refunds import services
    from refunds.models import Order, Ticket
    from tests.reviewing import decide

    workers("w1")
    promised = date(2026, 11, 2)
    numbers = []
    for i in range(6):
        order = Order.objects.create(
            number=f"R{i:03d}",
            customer_name=f"Customer {i}",
            customer_email=f"reuse{i}@example.com",
            promised_on=promised,
            delivered_on=promised + timedelta(days=3),
            shipping_fee_cents=900,
        )
        numbers.append(order.number)
    first = services.ticket_open(order_number=numbers[0])
    wait_for_status([first], "awaiting_review")  # the worker's connections are open now
    before = sessions_opened()
    tickets = [services.ticket_open(order_number=number) for number in numbers[1:]]
    wait_for_status(tickets, "awaiting_review")
    for ticket in Ticket.objects.filter(pk__in=[t.pk for t in tickets]):
        decide(ticket, admin_user)
    wait_for_status(tickets, "refunded")
    opened = sessions_opened() - before
    assert opened <= 3, f"{opened} sessions for 10 tasks: the worker reconnects per task"

    with connection.cursor() as cursor:  # the server drops every connection but this one
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    first.refresh_from_db()
    decide(first, admin_user)
    wait_for_status([first], "refunded")
    assert Ticket.objects.get(pk=first.pk).last_error == ""


def wait_for_status(tickets, status: str) -> None:
    from devtools.processes import wait_for
    from refunds.models import Ticket

    ids = [t.pk for t in tickets]
    wait_for(
        lambda: Ticket.objects.filter(pk__in=ids, status=status).count() == len(ids),
        what=f"{len(ids)} ticket(s) {status}",
        timeout=60,
    )
