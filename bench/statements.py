"""Where an advance's time goes: statements, checkpointer reads and bytes per refunded ticket.

    .venv/bin/python bench/statements.py                    # embedded and postgres, 30 tickets
    .venv/bin/python bench/statements.py --backends postgres --tickets 50

Runs the full stack's own code in this process (no Celery: `runner.advance` is called directly,
so the figures are the advance's, not the broker's or a driver's): open a ticket, advance it to
its review, approve, advance it to refunded. Counts, per ticket:

- SQL statements on the app database (Django's execute wrapper) and on the checkpoint database
  (SQLite's trace callback; psycopg cursor calls that are not Django's);
- checkpointer reads (`get_tuple` and `list` calls: what a `get_state` costs);
- wall time of each advance (on PostgreSQL also the part spent inside psycopg calls, the app's
  and the checkpointer's round trips), and checkpoint bytes left per refunded ticket.

It uses only public entry points (services, runner.advance), so the same file runs against an
older checkout to show before and after: `cd /tmp/old && python /path/to/bench/statements.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the checkout being measured (see the docstring)
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from bench._common import drop_postgres_db, prepare_environment, say  # noqa: E402


class Counts:
    def __init__(self) -> None:
        self.c: Counter = Counter()

    def app(self, execute, sql, params, many, context):
        self.c["app statements"] += 1
        return execute(sql, params, many, context)


def measure(backend: str, tickets: int) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="bench-statements-"))
    prepare_environment(
        backend,
        data_dir,
        EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
        REFUNDS_GATEWAY="bench.reference.MemoryGateway",
        LOG_LEVEL="ERROR",
    )
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection

    from bench.reference import order_facts
    from refunds import enqueue, runner, services
    from refunds.models import Order, Ticket

    try:
        from refunds import persistence

        saver_of = persistence.checkpointer
    except ImportError:  # an older checkout
        saver_of = lambda: runner.graph().checkpointer  # noqa: E731

    call_command("migrate", verbosity=0)
    enqueue.wake = lambda ticket_id: True  # no broker: this process advances by hand
    reviewer = User.objects.create_superuser("bench-admin", password="x")
    numbers = [f"S{i:05d}" for i in range(tickets + 1)]
    for f in map(order_facts, numbers):
        Order.objects.create(
            number=f["number"],
            customer_name=f["customer_name"],
            customer_email=f["customer_email"],
            promised_on=f["promised_on"],
            delivered_on=f["delivered_on"],
            shipping_fee_cents=f["fee_cents"],
        )

    counts = Counts()
    saver = saver_of()
    real_get_tuple, real_list = saver.get_tuple, saver.list

    def get_tuple(config):
        counts.c["checkpointer reads"] += 1
        return real_get_tuple(config)

    def listing(*args, **kwargs):
        counts.c["checkpointer reads"] += 1
        return real_list(*args, **kwargs)

    saver.get_tuple, saver.list = get_tuple, listing
    in_sql = [0.0]  # seconds spent inside psycopg calls (PostgreSQL only)
    if backend == "embedded":

        def traced(sql: str) -> None:
            if not sql.startswith(("BEGIN", "COMMIT", "PRAGMA")):
                counts.c["checkpoint statements"] += 1

        saver.conn.set_trace_callback(traced)
    else:
        import psycopg

        real_execute, real_many = psycopg.Cursor.execute, psycopg.Cursor.executemany

        def execute(self, *args, **kwargs):
            counts.c["psycopg calls"] += 1
            started = time.perf_counter()
            try:
                return real_execute(self, *args, **kwargs)
            finally:
                in_sql[0] += time.perf_counter() - started

        def executemany(self, *args, **kwargs):
            counts.c["psycopg calls"] += 1
            started = time.perf_counter()
            try:
                return real_many(self, *args, **kwargs)
            finally:
                in_sql[0] += time.perf_counter() - started

        psycopg.Cursor.execute, psycopg.Cursor.executemany = execute, executemany

    times: dict[str, list[float]] = {"to review": [], "to refunded": []}
    sql_times: dict[str, list[float]] = {"to review": [], "to refunded": []}
    with connection.execute_wrapper(counts.app):
        for i, number in enumerate(numbers):
            warmup = i == 0
            before = Counter(counts.c)
            ticket = services.ticket_open(order_number=number, note="late")
            t0, s0 = time.perf_counter(), in_sql[0]
            assert runner.advance(ticket.pk) == "awaiting_review"
            t1, s1 = time.perf_counter(), in_sql[0]
            ticket = Ticket.objects.get(pk=ticket.pk)
            services.ticket_decide(
                ticket=ticket,
                interrupt_id=ticket.pending_interrupt_id,
                orders=services.review_answers(ticket, answer="approve"),
                reviewer=reviewer,
            )
            t2, s2 = time.perf_counter(), in_sql[0]
            assert runner.advance(ticket.pk) == "refunded"
            t3, s3 = time.perf_counter(), in_sql[0]
            if warmup:  # the first ticket opens connections and compiles the graph
                counts.c = before
                continue
            times["to review"].append((t1 - t0) * 1000)
            times["to refunded"].append((t3 - t2) * 1000)
            sql_times["to review"].append((s1 - s0) * 1000)
            sql_times["to refunded"].append((s3 - s2) * 1000)

    per = {k: v / tickets for k, v in counts.c.items()}
    if backend == "postgres":
        per["checkpoint statements"] = per.pop("psycopg calls", 0) - per["app statements"]
    per["checkpoint bytes"] = checkpoint_bytes(saver, backend) / (tickets + 1)
    for phase, values in times.items():
        per[f"advance {phase} ms (p50)"] = statistics.median(values)
        if backend == "postgres":  # waiting on psycopg calls, app's and checkpointer's
            per[f"advance {phase}: in SQL ms (p50)"] = statistics.median(sql_times[phase])
    from django.db import connections

    connections.close_all()
    if backend == "postgres":
        drop_postgres_db()
    shutil.rmtree(data_dir, ignore_errors=True)
    return per


def checkpoint_bytes(saver, backend: str) -> int:
    if backend == "embedded":
        conn = saver.conn
        rows = conn.execute(
            "SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints"
        ).fetchone()[0]
        writes = conn.execute("SELECT coalesce(sum(length(value)), 0) FROM writes").fetchone()[0]
        return rows + writes
    with saver.conn.connection() as conn:
        total = 0
        for table, column in (
            ("checkpoints", "pg_column_size(checkpoint) + pg_column_size(metadata)"),
            ("checkpoint_blobs", "pg_column_size(blob)"),
            ("checkpoint_writes", "pg_column_size(blob)"),
        ):
            row = conn.execute(f"SELECT coalesce(sum({column}), 0) AS n FROM {table}").fetchone()
            total += int(row["n"])
        return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="embedded,postgres")
    parser.add_argument("--tickets", type=int, default=30)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        result = measure(args.one, args.tickets)
        print("RESULT " + repr(result))
        return
    import ast
    import subprocess

    results = {}
    for backend in args.backends.split(","):
        say(f"statements: {backend}, {args.tickets} tickets, in-process advances")
        out = subprocess.run(
            [sys.executable, __file__, "--one", backend, "--tickets", str(args.tickets)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        results[backend] = ast.literal_eval(out.split("RESULT ", 1)[1].strip())
    keys = sorted({k for r in results.values() for k in r})
    print(f"\n{'per refunded ticket':<34}" + "".join(f"{b:>14}" for b in results))
    for key in keys:
        row = "".join(f"{results[b].get(key, float('nan')):14.1f}" for b in results)
        print(f"{key:<34}{row}")


if __name__ == "__main__":
    main()
