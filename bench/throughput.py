"""Tickets per second through the full stack, side by side with bare LangGraph and naive glue.

    .venv/bin/python bench/throughput.py                       # all configurations, ~5 minutes
    .venv/bin/python bench/throughput.py --configs postgres:4 --tickets 100

For each configuration (embedded defaults = SQLite + embedded Redis; postgres = PostgreSQL +
the Redis on 127.0.0.1:6379, db 13) and worker count, in one fresh database:

1. bare LangGraph: the refund graph (refunds.graph.build_graph) with the same kind of
   checkpointer and store, durability "sync", fake collaborators, one process, no Celery;
2. naive Celery glue (bench/naive_glue.py) with N worker processes;
3. the full stack with N worker processes: `ticket_open` -> Celery -> interrupt -> mirror ->
   `ticket_decide` -> Celery -> charge (ledger row) -> email (outbox, locmem backend);
4. decision -> refunded latency on an idle queue (one ticket at a time), the same for tickets
   of three orders of one customer (`--several`, their charges fanned out), and under a burst of
   decisions for tickets that all wait at once;
5. the intake's default reader in the driver process: messages read per second;
6. checkpoint rows and bytes per ticket;
7. bare and full again with checkpoints encrypted (issue 48: LangGraph's EncryptedSerializer,
   AES-GCM; the full stack's store values too), in the same database, for the cost of it.

Each configuration runs in a child process (settings come from the environment at start).
Figures print as they come; everything lands in bench/results/throughput-<time>.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    REDIS_URL,
    drop_postgres_db,
    group_cpu_seconds,
    machine,
    pct,
    prepare_environment,
    redis_client,
    say,
    start_workers,
    wait_for,
    write_results,
)

DEFAULT_CONFIGS = "embedded:1,postgres:1,postgres:2,postgres:4"
# How often the driver looks for new reviews and finished tickets. On a 2-CPU machine a tighter
# loop steals CPU from the workers; latencies come from row timestamps, not from this polling.
POLL = 0.05


# --- one configuration, in its own process -----------------------------------------------------
def prepare_throughput_environment(backend: str, data_dir: Path) -> None:
    prepare_environment(
        backend,
        data_dir,
        EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
        REFUNDS_GATEWAY="bench.reference.MemoryGateway",
        LOG_LEVEL="WARNING",
    )
    if backend == "postgres":
        os.environ["CELERY_BROKER_URL"] = REDIS_URL


def wait_until(predicate, *, timeout: float, what: str, every: float = 0.01):
    return wait_for(predicate, timeout=timeout, what=what, every=every)


def run_naive(n_workers: int, numbers: list[str], url: str, data_dir: Path) -> dict:
    os.environ["BENCH_CHECKPOINT_URL"] = url
    from bench import naive_glue

    client = redis_client(naive_glue.BROKER)
    client.delete(naive_glue.PAUSED, naive_glue.DONE)
    workers = start_workers(
        "bench.naive_glue", n_workers, data_dir / "logs", dict(os.environ), "naive"
    )
    try:
        cpu_before = group_cpu_seconds(workers)
        started = time.perf_counter()
        for number in numbers:
            naive_glue.start.delay(f"naive-{number}", number)
        done, deadline = 0, time.monotonic() + 600
        while done < len(numbers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"naive glue: {done} of {len(numbers)} done after 600 s")
            paused = client.lpop(naive_glue.PAUSED, 100) or []
            for raw in paused:
                naive_glue.resume.delay(*json.loads(raw))
            done += len(client.lpop(naive_glue.DONE, 100) or [])
            if not paused:
                time.sleep(POLL)
        elapsed = time.perf_counter() - started
        cpu = group_cpu_seconds(workers) - cpu_before
    finally:
        for worker in workers:
            worker.stop()
        # Importing the glue made its Celery app the current one, and the desk's services send
        # through the current app: give it back, or the full stack's tasks go to the glue's queue.
        from config.celery_app import app as desk_app

        desk_app.set_current()
    return {
        "tickets": len(numbers),
        "seconds": elapsed,
        "tickets_per_s": len(numbers) / elapsed,
        "worker_cpu_ms_per_ticket": cpu * 1000 / len(numbers),
        "worker_errors": sum(w.errors() for w in workers),
    }


class Desk:
    """Drives the full stack as reviewers would: open tickets, approve what is pending."""

    def __init__(self):
        from django.contrib.auth.models import User

        self.reviewer = User.objects.create_superuser("bench-admin", password="x")
        self.decided: set[int] = set()

    def open(self, numbers: list[str]) -> list[int]:
        from refunds import services

        return [services.ticket_open(order_number=n, note="late").pk for n in numbers]

    def open_several(self, numbers: list[str]) -> int:
        from refunds import services

        return services.ticket_open(order_numbers=numbers, note="late").pk

    def decide_pending(self, ids: list[int] | None = None) -> int:
        from refunds import services
        from refunds.models import Ticket

        pending = Ticket.objects.awaiting().exclude(pk__in=self.decided)
        if ids is not None:
            pending = pending.filter(pk__in=ids)
        count = 0
        for ticket in pending.only("pk", "pending_interrupt_id", "required_role", "status"):
            services.ticket_decide(
                ticket=ticket,
                interrupt_id=ticket.pending_interrupt_id,
                orders=services.review_answers(ticket, answer="approve"),
                reviewer=self.reviewer,
            )
            self.decided.add(ticket.pk)
            count += 1
        return count

    @staticmethod
    def refunded(ids: list[int]) -> int:
        from refunds.models import Ticket

        failed = Ticket.objects.filter(pk__in=ids, status=Ticket.Status.FAILED).count()
        if failed:
            raise RuntimeError(f"{failed} ticket(s) failed")
        return Ticket.objects.filter(pk__in=ids, status=Ticket.Status.REFUNDED).count()


def run_full(desk: Desk, numbers: list[str], workers) -> dict:
    from refunds.models import Charge, Email

    cpu_before = group_cpu_seconds(workers)
    started = time.perf_counter()
    ids = desk.open(numbers)
    deadline, last_note = time.monotonic() + 600, time.monotonic()
    while (done := desk.refunded(ids)) < len(ids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"full stack: {done} of {len(ids)} refunded after 600 s")
        if not desk.decide_pending(ids):
            time.sleep(POLL)
        if time.monotonic() - last_note > 5:
            say(f"    full stack: {done}/{len(ids)} refunded")
            last_note = time.monotonic()
    elapsed = time.perf_counter() - started
    cpu = group_cpu_seconds(workers) - cpu_before
    charges = Charge.objects.filter(ticket_id__in=ids).count()
    emails = Email.objects.filter(ticket_id__in=ids, sent_at__isnull=False).count()
    assert charges == emails == len(ids), (charges, emails, len(ids))
    return {
        "tickets": len(ids),
        "seconds": elapsed,
        "tickets_per_s": len(ids) / elapsed,
        "worker_cpu_ms_per_ticket": cpu * 1000 / len(ids),
        "charges": charges,
        "emails_sent": emails,
    }


def latencies_ms(ids: list[int]) -> list[float]:
    """Decision recorded -> Ticket mirror says refunded, from the rows' own timestamps."""
    from refunds.models import Decision

    rows = Decision.objects.filter(ticket_id__in=ids).values_list(
        "decided_at", "ticket__updated_at"
    )
    return sorted((done - decided).total_seconds() * 1000 for decided, done in rows)


def run_idle_latency(desk: Desk, numbers: list[str], several: int = 1) -> dict:
    """Decisions one at a time on an idle queue; with `several`, each ticket covers that many
    consecutive orders of `numbers` (one customer's: see several_orders)."""
    from refunds.models import Ticket

    wall: list[float] = []
    groups = [numbers[i : i + several] for i in range(0, len(numbers), several)]
    for group in groups:
        if several == 1:
            (ticket_id,) = desk.open(group)
        else:
            ticket_id = desk.open_several(group)
        wait_until(
            lambda ticket_id=ticket_id: Ticket.objects.filter(
                pk=ticket_id, status="awaiting_review"
            ).exists(),
            timeout=60,
            what="the review",
            every=POLL,
        )
        time.sleep(0.05)  # let the worker finish releasing its lease: an idle queue
        t0 = time.perf_counter()
        desk.decide_pending([ticket_id])
        wait_until(
            lambda ticket_id=ticket_id: desk.refunded([ticket_id]),
            timeout=60,
            what="the refund",
            every=POLL,
        )
        wall.append((time.perf_counter() - t0) * 1000)
    idle_ids = desk.decided & set(
        Ticket.objects.filter(order__number__in=numbers).values_list("pk", flat=True)
    )
    rows = latencies_ms(idle_ids)
    return {
        "decisions": len(rows),
        "p50_ms": pct(rows, 50),
        "p95_ms": pct(rows, 95),
        "max_ms": max(rows),
        "polled_p50_ms": pct(sorted(wall), 50),
        "where_p50_ms": idle_breakdown(idle_ids),
    }


def several_orders(groups: int, per_ticket: int) -> list[str]:
    """`groups` customers with `per_ticket` late orders each, numbered in order."""
    from bench.reference import order_facts
    from refunds.models import Order

    numbers = []
    for g in range(groups):
        for k in range(per_ticket):
            f = order_facts(f"T{g * per_ticket + k:05d}")
            Order.objects.create(
                number=f["number"],
                customer_name=f"Customer T{g}",
                customer_email=f"several{g}@example.com",
                promised_on=f["promised_on"],
                delivered_on=f["delivered_on"],
                shipping_fee_cents=f["fee_cents"],
            )
            numbers.append(f["number"])
    return numbers


def reader_rate(seconds: float = 1.0) -> dict:
    """The intake's default reader (the trained classifier and the rules), in this process:
    labelled messages read per second (the 90 of tests/data/intake_eval.jsonl, over and over, for
    about `seconds`)."""
    from intake.reader import default

    path = Path(__file__).resolve().parent.parent / "tests" / "data" / "intake_eval.jsonl"
    messages = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for m in messages:  # warm: patterns compiled, caches filled
        default.read(sender=m["sender"], subject=m["subject"], body=m["body"])
    read, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for m in messages:
            default.read(sender=m["sender"], subject=m["subject"], body=m["body"])
        read += len(messages)
    return {"messages": read, "messages_per_s": read / (time.perf_counter() - started)}


def idle_breakdown(ids: set[int]) -> dict:
    """Where an idle decision's time goes, from the rows' own timestamps (p50 of each leg):
    decision recorded -> ledger row written (the broker hop, the grant, the resume up to the
    charge), -> email marked sent (the charge, its checkpoint, the email), -> mirror refunded
    (the email's checkpoint, notify, the release)."""
    from refunds.models import Charge, Decision, Email, Ticket

    def stamps(model, field: str, **where) -> dict:
        return dict(model.objects.filter(**where).values_list("ticket_id", field))

    decided = stamps(Decision, "decided_at", ticket_id__in=ids)
    charged = stamps(Charge, "created_at", ticket_id__in=ids)
    sent = stamps(Email, "sent_at", ticket_id__in=ids, key__endswith=":email")
    done = dict(Ticket.objects.filter(pk__in=ids).values_list("pk", "updated_at"))
    legs: dict[str, list[float]] = {"to the charge": [], "to the email": [], "to the release": []}
    for ticket_id in set(decided) & set(charged) & set(sent) & set(done):
        marks = [decided[ticket_id], charged[ticket_id], sent[ticket_id], done[ticket_id]]
        for leg, (a, b) in zip(legs, zip(marks, marks[1:], strict=False), strict=True):
            legs[leg].append((b - a).total_seconds() * 1000)
    return {leg: pct(sorted(values), 50) for leg, values in legs.items() if values}


def run_burst_latency(desk: Desk, numbers: list[str]) -> dict:
    ids = desk.open(numbers)
    from refunds.models import Ticket

    wait_until(
        lambda: Ticket.objects.awaiting().filter(pk__in=ids).count() == len(ids),
        timeout=600,
        what="every burst ticket to wait on its review",
        every=0.05,
    )
    started = time.perf_counter()
    desk.decide_pending(ids)
    recorded = time.perf_counter() - started
    wait_until(lambda: desk.refunded(ids) == len(ids), timeout=600, what="the burst", every=POLL)
    drained = time.perf_counter() - started
    rows = latencies_ms(ids)
    return {
        "decisions": len(rows),
        "p50_ms": pct(rows, 50),
        "p95_ms": pct(rows, 95),
        "max_ms": max(rows),
        "seconds_to_record": recorded,
        "seconds_to_drain": drained,
    }


def checkpoint_sizes(prefix: str, tickets: int | None = None) -> dict:
    """Rows and bytes that the full stack's threads left in the checkpointer and store, per
    ticket (of `tickets`, or of every ticket)."""
    from django.conf import settings

    from refunds import persistence
    from refunds.models import Ticket

    threads = tickets or Ticket.objects.count()
    like = f"{prefix}%"
    if settings.IS_POSTGRES:
        import psycopg

        queries = {
            "checkpoints": "SELECT count(*), coalesce(sum(pg_column_size(checkpoint) + "
            "pg_column_size(metadata)), 0) FROM checkpoints WHERE thread_id LIKE %s",
            "checkpoint_blobs": "SELECT count(*), coalesce(sum(pg_column_size(blob)), 0) "
            "FROM checkpoint_blobs WHERE thread_id LIKE %s",
            "checkpoint_writes": "SELECT count(*), coalesce(sum(pg_column_size(blob)), 0) "
            "FROM checkpoint_writes WHERE thread_id LIKE %s",
        }
        with psycopg.connect(persistence.checkpoint_url()) as conn:
            out = {
                t: tuple(map(int, conn.execute(q, (like,)).fetchone())) for t, q in queries.items()
            }
            on_disk = conn.execute(
                "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['checkpoints', "
                "'checkpoint_blobs', 'checkpoint_writes']) AS c"
            ).fetchone()[0]
            all_threads = conn.execute(
                "SELECT count(DISTINCT thread_id) FROM checkpoints"
            ).fetchone()[0]
        on_disk = int(on_disk)
    else:
        import sqlite3

        path = persistence.checkpoint_url().removeprefix("sqlite:///")
        conn = sqlite3.connect(path)
        out = {
            "checkpoints": conn.execute(
                "SELECT count(*), coalesce(sum(length(checkpoint) + length(metadata)), 0) "
                "FROM checkpoints WHERE thread_id LIKE ?",
                (like,),
            ).fetchone(),
            "writes": conn.execute(
                "SELECT count(*), coalesce(sum(length(value)), 0) FROM writes "
                "WHERE thread_id LIKE ?",
                (like,),
            ).fetchone(),
        }
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        all_threads = conn.execute("SELECT count(DISTINCT thread_id) FROM checkpoints").fetchone()[
            0
        ]
        conn.close()
        on_disk = Path(path).stat().st_size
    rows = sum(r[0] for r in out.values())
    payload = sum(r[1] for r in out.values())
    return {
        "tickets": threads,
        "rows_per_ticket": rows / threads,
        "payload_bytes_per_ticket": payload / threads,
        "by_table": {
            t: {"rows_per_ticket": r[0] / threads, "bytes_per_ticket": r[1] / threads}
            for t, r in out.items()
        },
        "on_disk_bytes_per_thread": on_disk / max(all_threads, 1),
        "threads_in_checkpointer": all_threads,
    }


def run_one(backend: str, n_workers: int, args) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix=f"bench-refunds-{backend}{n_workers}-"))
    prepare_throughput_environment(backend, data_dir)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from bench.reference import order_facts, run_bare
    from devtools import embedded_redis
    from refunds import persistence
    from refunds.models import Order
    from refunds.persistence.encryption import serializer

    call_command("migrate", verbosity=0)  # also creates the checkpoint and store tables, once
    redis_proc = None
    if settings.USES_EMBEDDED_BROKER:
        redis_proc = embedded_redis.start(settings.EMBEDDED_REDIS_SOCKET)
    else:
        redis_client(settings.CELERY_BROKER_URL).flushdb()
    os.environ["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL  # for the naive glue
    url = persistence.checkpoint_url()
    label = f"{backend}:{n_workers}"
    result: dict = {"config": label, "backend": backend, "workers": n_workers}
    workers = []
    try:
        numbers = [f"F{i:05d}" for i in range(args.tickets + args.idle + args.burst)]
        encrypted_numbers = [f"G{i:05d}" for i in range(args.tickets)]
        Order.objects.bulk_create(
            Order(
                number=f["number"],
                customer_name=f["customer_name"],
                customer_email=f["customer_email"],
                promised_on=f["promised_on"],
                delivered_on=f["delivered_on"],
                shipping_fee_cents=f["fee_cents"],
            )
            for f in map(order_facts, numbers + encrypted_numbers)
        )
        bare_numbers = [f"B{i:05d}" for i in range(args.tickets)]
        say(f"{label}: bare LangGraph, {len(bare_numbers)} tickets in one process")
        result["bare"] = run_bare(url, bare_numbers, "bare")
        say(f"{label}:   bare {result['bare']['tickets_per_s']:.1f} tickets/s")
        key = b"bench-only-checkpoint-key-32byte"
        enc_numbers = [f"C{i:05d}" for i in range(args.tickets)]
        result["bare_encrypted"] = run_bare(url, enc_numbers, "bare-enc", serializer([key]))
        say(f"{label}:   bare encrypted {result['bare_encrypted']['tickets_per_s']:.1f} tickets/s")

        naive_numbers = [f"N{i:05d}" for i in range(args.tickets)]
        say(f"{label}: naive Celery glue, {n_workers} worker(s)")
        result["naive"] = run_naive(n_workers, naive_numbers, url, data_dir)
        say(f"{label}:   naive {result['naive']['tickets_per_s']:.1f} tickets/s")

        say(f"{label}: full stack, {n_workers} worker(s)")
        workers = start_workers("config", n_workers, data_dir / "logs", dict(os.environ), "desk")
        desk = Desk()
        t, i = args.tickets, args.idle
        result["full"] = run_full(desk, numbers[:t], workers)
        say(f"{label}:   full {result['full']['tickets_per_s']:.1f} tickets/s")

        say(f"{label}: decision -> refunded on an idle queue, {i} decisions one at a time")
        result["latency_idle"] = run_idle_latency(desk, numbers[t : t + i])
        say(
            f"{label}:   idle p50 {result['latency_idle']['p50_ms']:.1f} ms, "
            f"p95 {result['latency_idle']['p95_ms']:.1f} ms"
        )
        legs = result["latency_idle"]["where_p50_ms"]
        say(f"{label}:   idle p50 by leg: " + ", ".join(f"{k} {v:.1f} ms" for k, v in legs.items()))
        if args.several:
            say(f"{label}: decision -> refunded for {args.several} tickets of three orders")
            three = several_orders(args.several, 3)
            result["latency_idle_three"] = run_idle_latency(desk, three, several=3)
            say(
                f"{label}:   three orders: idle p50 "
                f"{result['latency_idle_three']['p50_ms']:.1f} ms, "
                f"p95 {result['latency_idle_three']['p95_ms']:.1f} ms"
            )
        result["reader"] = reader_rate()
        say(f"{label}: reader {result['reader']['messages_per_s']:,.0f} messages/s")
        say(f"{label}: decision -> refunded under a burst of {args.burst} decisions")
        result["latency_burst"] = run_burst_latency(desk, numbers[t + i :])
        say(
            f"{label}:   burst p50 {result['latency_burst']['p50_ms']:.0f} ms, "
            f"p95 {result['latency_burst']['p95_ms']:.0f} ms"
        )
        # One-order tickets only (their numbers start with F), as before tickets of several.
        result["checkpoints"] = checkpoint_sizes("refund-F")
        result["full"]["worker_errors"] = sum(w.errors() for w in workers)

        say(f"{label}: full stack, checkpoints encrypted, {n_workers} worker(s)")
        for worker in workers:
            worker.stop()
        os.environ["REFUNDS_CHECKPOINT_KEYS"] = base64.urlsafe_b64encode(key).decode()
        settings.REFUNDS_CHECKPOINT_KEYS = [key]
        persistence.close_persistence()
        workers = start_workers("config", n_workers, data_dir / "logs", dict(os.environ), "enc")
        result["full_encrypted"] = run_full(desk, encrypted_numbers, workers)
        result["full_encrypted"]["worker_errors"] = sum(w.errors() for w in workers)
        say(f"{label}:   full encrypted {result['full_encrypted']['tickets_per_s']:.1f} tickets/s")
        result["checkpoints_encrypted"] = checkpoint_sizes("refund-G", len(encrypted_numbers))
    finally:
        for worker in workers:
            worker.stop()
        persistence.close_persistence()
        from django.db import connections

        connections.close_all()
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
        else:
            redis_client(settings.CELERY_BROKER_URL).flushdb()
        if backend == "postgres":
            drop_postgres_db()
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            say(f"{label}: kept {data_dir}")
    return result


# --- the whole run -----------------------------------------------------------------------------
def summarize(results: list[dict]) -> dict:
    ratios: dict = {}
    for r in results:
        full, bare, naive = (r[k]["tickets_per_s"] for k in ("full", "bare", "naive"))
        ratios[r["config"]] = {
            "full_vs_bare": full / bare,
            "full_vs_naive": full / naive,
            "naive_vs_bare": naive / bare,
            "bare_encrypted_vs_bare": r["bare_encrypted"]["tickets_per_s"] / bare,
            "full_encrypted_vs_full": r["full_encrypted"]["tickets_per_s"] / full,
        }
    by = {r["config"]: r for r in results}
    if "postgres:1" in by and "postgres:4" in by:
        for kind in ("full", "naive"):
            ratios[f"postgres 1->4 workers ({kind})"] = (
                by["postgres:4"][kind]["tickets_per_s"] / by["postgres:1"][kind]["tickets_per_s"]
            )
    return ratios


def print_table(results: list[dict], ratios: dict) -> None:
    print()
    print(
        f"{'config':<12} {'bare t/s':>9} {'naive t/s':>10} {'full t/s':>9} {'full/bare':>10} "
        f"{'full/naive':>11} {'idle p50':>9} {'idle p95':>9} {'burst p50':>10} {'burst p95':>10} "
        f"{'ckpt rows':>10} {'ckpt KB':>8}"
    )
    for r in results:
        q = ratios[r["config"]]
        c = r["checkpoints"]
        bare, naive, full = (r[k]["tickets_per_s"] for k in ("bare", "naive", "full"))
        print(
            f"{r['config']:<12} {bare:9.1f} {naive:10.1f} "
            f"{full:9.1f} {q['full_vs_bare']:10.2f} {q['full_vs_naive']:11.2f} "
            f"{r['latency_idle']['p50_ms']:8.1f}ms {r['latency_idle']['p95_ms']:8.1f}ms "
            f"{r['latency_burst']['p50_ms']:9.0f}ms {r['latency_burst']['p95_ms']:9.0f}ms "
            f"{c['rows_per_ticket']:10.1f} {c['payload_bytes_per_ticket'] / 1024:8.1f}"
        )
    print()
    print(
        f"{'config':<12} {'CPU ms/ticket: bare':>20} {'naive workers':>14} {'full workers':>13} "
        f"{'bare/full':>10} {'naive/full':>11}"
    )
    for r in results:
        bare = r["bare"]["cpu_ms_per_ticket"]
        naive = r["naive"]["worker_cpu_ms_per_ticket"]
        full = r["full"]["worker_cpu_ms_per_ticket"]
        print(
            f"{r['config']:<12} {bare:20.1f} {naive:14.1f} {full:13.1f} "
            f"{bare / full:10.2f} {naive / full:11.2f}"
        )
    print()
    for r in results:
        three = r.get("latency_idle_three")
        if three:
            print(
                f"{r['config']:<12} three-order ticket, decision -> refunded: idle p50 "
                f"{three['p50_ms']:.1f} ms, p95 {three['p95_ms']:.1f} ms"
            )
        print(f"{r['config']:<12} reader: {r['reader']['messages_per_s']:,.0f} messages/s")
        q = ratios[r["config"]]
        plain, sealed = r["checkpoints"], r["checkpoints_encrypted"]
        print(
            f"{r['config']:<12} encrypted: bare {r['bare_encrypted']['tickets_per_s']:.1f} t/s "
            f"({q['bare_encrypted_vs_bare']:.2f}x plain), full "
            f"{r['full_encrypted']['tickets_per_s']:.1f} t/s "
            f"({q['full_encrypted_vs_full']:.2f}x plain); checkpoint KB/ticket "
            f"{plain['payload_bytes_per_ticket'] / 1024:.1f} plain, "
            f"{sealed['payload_bytes_per_ticket'] / 1024:.1f} encrypted"
        )
    for name, value in ratios.items():
        if not isinstance(value, dict):
            print(f"{name}: {value:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs",
        default=DEFAULT_CONFIGS,
        help=f"backend:workers, comma-separated (default {DEFAULT_CONFIGS})",
    )
    parser.add_argument("--tickets", type=int, default=200, help="tickets per throughput run")
    parser.add_argument("--idle", type=int, default=30, help="decisions timed one at a time")
    parser.add_argument("--burst", type=int, default=200, help="decisions in the burst")
    parser.add_argument(
        "--several", type=int, default=10, help="idle decisions on tickets of three orders"
    )
    parser.add_argument("--keep", action="store_true", help="keep each run's data folder")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one:  # the child: one configuration
        backend, workers = args.one.split(":")
        Path(args.out).write_text(json.dumps(run_one(backend, int(workers), args)))
        return

    say(f"throughput: {args.configs}, {args.tickets} tickets, idle {args.idle}, burst {args.burst}")
    info = machine()
    say(
        f"machine: {info.get('cpus')} CPUs ({info.get('cpu_model', '?')}), "
        f"Python {info['python']}, "
        f"PostgreSQL {info.get('postgresql', '-')}, Redis {info.get('redis', '-')}"
    )
    results = []
    for config in args.configs.split(","):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [
                sys.executable,
                __file__,
                "--one",
                config,
                "--out",
                out.name,
                "--tickets",
                str(args.tickets),
                "--idle",
                str(args.idle),
                "--burst",
                str(args.burst),
                "--several",
                str(args.several),
            ] + (["--keep"] if args.keep else [])
            subprocess.run(command, check=True)
            results.append(json.loads(Path(out.name).read_text()))
    ratios = summarize(results)
    print_table(results, ratios)
    path = write_results(
        "throughput",
        {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": info,
            "settings": vars(args),
            "results": results,
            "ratios": ratios,
        },
    )
    say(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
