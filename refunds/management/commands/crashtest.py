"""Run tickets through real worker processes while killing them, and count what went wrong.

Kills come from inside (os._exit at a named point of a thread: inside every node, between nodes,
during a resume; planned per ticket through refunds/faults.py) and from outside (SIGKILL of a
whole worker, main process and pool child, at random moments; the worker is then restarted).
Reviewers approve (and sometimes reject) as soon as a review appears. A seed makes the plan
reproducible. Every run works in its own temporary data folder and database.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

CHILD_FLAG = "REFUNDS_CRASHTEST_CHILD"
EARLY_POINTS = [
    "lookup",
    "fraud_check",
    "history_check",
    "check_policy",
    "after:lookup",
    "after:check_policy",
]
LATE_POINTS = [
    "after:triage",
    "resume",
    "after:approve",
    "charge_card:before_gateway",
    "charge_card:after_gateway",
    "after:charge_card",
    "email:before_send",
    "email:after_send",
]
FINAL = {"refunded", "declined", "rejected", "failed"}


class Command(BaseCommand):
    help = "Kill real workers at random points while tickets run; print a JSON summary."

    def add_arguments(self, parser):
        parser.add_argument("--tickets", type=int, default=20)
        parser.add_argument("--kills", type=int, default=10)
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument(
            "--backend",
            choices=["embedded", "postgres"],
            default="embedded",
            help="embedded: SQLite + embedded Redis; postgres: PostgreSQL + Redis",
        )
        parser.add_argument(
            "--database-url",
            default="postgres://postgres@127.0.0.1:5432/refunds_crashtest",
            help="with --backend postgres: a database this run may drop and recreate",
        )
        parser.add_argument(
            "--broker-url",
            default="redis://127.0.0.1:6379/13",
            help="with --backend postgres: a Redis database this run may flush",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=None,
            help="seconds to wait for every ticket to settle (default 60 + 2/ticket)",
        )
        parser.add_argument("--keep", action="store_true", help="keep the data folder and logs")

    def handle(self, *args, **opts):
        for name in ("tickets", "workers"):
            if opts[name] < 1:
                raise CommandError(f"--{name} must be at least 1")
        if opts["kills"] < 0:
            raise CommandError("--kills must be 0 or more")
        if opts["seed"] is None:
            opts["seed"] = random.randrange(1_000_000)
        if os.environ.get(CHILD_FLAG):
            summary = Run(opts, self.stderr).execute()
            self.stdout.write(json.dumps(summary, indent=2))
            if summary["lost"] or summary["double_charges"] or summary["double_emails"]:
                sys.exit(1)
            return
        sys.exit(self._run_isolated(opts))

    def _run_isolated(self, opts) -> int:
        """Re-run this command in a child process whose settings point at a fresh data folder
        (and database), so a crash test never touches real tickets."""
        data = Path(tempfile.mkdtemp(prefix="refunds-crashtest-"))
        env = {k: v for k, v in os.environ.items() if k not in ("CHECKPOINT_URL",)}
        env |= {
            CHILD_FLAG: "1",
            "REFUNDS_DATA_DIR": str(data),
            "DATABASE_URL": f"sqlite:///{data / 'db.sqlite3'}",
            "REFUNDS_LEASE_SECONDS": "3",
            "REFUNDS_SWEEP_SECONDS": "1",
            "REFUNDS_SWEEP_GRACE_SECONDS": "2",
            "REFUNDS_CRASH_PLAN": str(data / "crash-plan.json"),
            "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "EMAIL_FILE_PATH": str(data / "mail"),
            "LOG_LEVEL": "WARNING",
        }
        env.pop("CELERY_BROKER_URL", None)
        if opts["backend"] == "postgres":
            _recreate_postgres(opts["database_url"])
            env |= {"DATABASE_URL": opts["database_url"], "CELERY_BROKER_URL": opts["broker_url"]}
        argv = [
            "crashtest",
            "--tickets",
            str(opts["tickets"]),
            "--kills",
            str(opts["kills"]),
            "--seed",
            str(opts["seed"]),
            "--workers",
            str(opts["workers"]),
            "--backend",
            opts["backend"],
        ]
        if opts["timeout"]:
            argv += ["--timeout", str(opts["timeout"])]
        try:
            return subprocess.call(
                [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *argv],
                env=env,
            )
        finally:
            if opts["keep"]:
                self.stderr.write(f"crashtest data kept in {data}")
            else:
                shutil.rmtree(data, ignore_errors=True)


def _recreate_postgres(url: str) -> None:
    import psycopg
    from psycopg import sql

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


class Run:
    def __init__(self, opts, progress):
        self.opts, self.progress = opts, progress
        self.rng = random.Random(opts["seed"])
        self.data = Path(settings.DATA_DIR)
        self.logs = self.data / "logs"
        self.workers: list = []
        self.outside_kills = 0
        self.rejects: set[int] = set()  # chosen up front, so the seed fixes every outcome

    def execute(self) -> dict:
        from refunds.processes import CeleryProcess

        started = time.monotonic()
        call_command("migrate", verbosity=0)
        broker = self._start_broker()
        tickets = self._open_tickets()
        inside, outside = self._plan_kills(tickets)
        env = {**os.environ}
        self.workers = [
            CeleryProcess.worker(f"crash{i}", self.logs, env) for i in range(self.opts["workers"])
        ]
        for w in self.workers:
            w.start(wait_ready=True)
        beat = CeleryProcess.beat(self.logs, env).start()
        timeout = self.opts["timeout"] or 60 + 2 * len(tickets)
        try:
            settled = self._drive(tickets, outside, deadline=time.monotonic() + timeout)
        finally:
            for proc in [*self.workers, beat]:
                proc.stop()
            if broker is not None:
                broker.terminate()
        return self._summary(tickets, inside, settled, time.monotonic() - started)

    def _start_broker(self):
        from refunds import embedded_redis

        if settings.USES_EMBEDDED_BROKER:
            return embedded_redis.start(settings.EMBEDDED_REDIS_SOCKET)
        from config.celery_app import app

        with app.connection_for_write() as conn:
            conn.default_channel.client.flushdb()
        return None

    def _open_tickets(self) -> list[int]:
        from django.contrib.auth.models import Group, User

        from refunds import services
        from refunds.models import Order

        for username, group in (("agent", "Support agents"), ("manager", "Managers")):
            user = User.objects.create_user(username)
            user.groups.add(Group.objects.get(name=group))
        promised = date(2026, 11, 2)
        ids = []
        for i in range(self.opts["tickets"]):
            late = self.rng.choice([-1, 0, 1, 2, 3, 4, 5, 6, 8])  # about 2 in 9 are not late
            fee = self.rng.choice([499, 699, 1250, 2000, 2001, 3500, 4800])
            order = Order.objects.create(
                number=f"C{i:05d}",
                customer_name=f"Customer {i}",
                customer_email=f"customer{i % max(5, self.opts['tickets'] // 3)}@example.com",
                promised_on=promised,
                delivered_on=promised + timedelta(days=late),
                shipping_fee_cents=fee,
            )
            ticket = services.ticket_open(order_number=order.number, note="crashtest")
            ids.append(ticket.pk)
            if self.rng.random() < 0.1:
                self.rejects.add(ticket.pk)
        return ids

    def _plan_kills(self, tickets: list[int]) -> tuple[dict, int]:
        from refunds.models import Ticket

        kills = self.opts["kills"]
        inside_count = min(len(tickets), (kills + 1) // 2)
        chosen = self.rng.sample(tickets, inside_count)
        plan = {}
        for ticket in Ticket.objects.filter(pk__in=chosen).select_related("order"):
            # Points after the review only for tickets that get there, so every kill fires.
            charged = ticket.order.delivered_on > ticket.order.promised_on
            charged = charged and ticket.pk not in self.rejects
            point = self.rng.choice(EARLY_POINTS + (LATE_POINTS if charged else []))
            plan[ticket.thread_id] = {"point": point, "times": 1}
        Path(settings.REFUNDS_CRASH_PLAN).write_text(json.dumps(plan, indent=1))
        return plan, kills - inside_count

    def _drive(self, tickets: list[int], outside: int, *, deadline: float) -> bool:
        from refunds.models import Ticket

        next_kill = time.monotonic() + self.rng.uniform(0.5, 2.0)
        last_report = 0.0
        while time.monotonic() < deadline:
            self._review()
            statuses = Counter(
                Ticket.objects.filter(pk__in=tickets).values_list("status", flat=True)
            )
            done = sum(n for s, n in statuses.items() if s in FINAL)
            if done == len(tickets) and not self._unapplied() and self.outside_kills >= outside:
                return True
            now = time.monotonic()
            if self.outside_kills < outside and now >= next_kill:
                self._kill_a_worker()
                next_kill = now + self.rng.uniform(0.5, 2.5)
            if now - last_report > 2:
                last_report = now
                fired = len(_markers())
                self.progress.write(
                    f"crashtest: {done}/{len(tickets)} settled, kills {fired} inside + "
                    f"{self.outside_kills} outside; "
                    + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()))
                )
            time.sleep(0.1)
        return False

    def _kill_a_worker(self) -> None:
        worker = self.rng.choice(self.workers)
        worker.kill()  # SIGKILL main process and pool child from outside
        self.outside_kills += 1
        worker.start()

    def _unapplied(self) -> bool:
        from refunds.models import Decision

        return Decision.objects.filter(applied_at=None, refused_reason="").exists()

    def _review(self) -> None:
        from django.contrib.auth.models import User

        from refunds import services
        from refunds.models import Ticket

        reviewers = {u.username: u for u in User.objects.filter(username__in=["agent", "manager"])}
        waiting = Ticket.objects.awaiting().filter(decisions__isnull=True)
        for ticket in waiting:
            reject = ticket.pk in self.rejects
            try:
                services.ticket_decide(
                    ticket=ticket,
                    interrupt_id=ticket.pending_interrupt_id,
                    answer="reject" if reject else "approve",
                    reason="not covered (crashtest)" if reject else "",
                    reviewer=reviewers[ticket.required_role],
                )
            except services.RefundError:
                pass  # the mirror moved on since we read it; the next pass sees the new state

    def _summary(self, tickets: list[int], plan: dict, settled: bool, seconds: float) -> dict:
        from django.db.models import Count

        from refunds.models import Charge, Ticket

        statuses = Counter(Ticket.objects.filter(pk__in=tickets).values_list("status", flat=True))
        charges = dict(
            Charge.objects.values_list("ticket").annotate(n=Count("id")).values_list("ticket", "n")
        )
        refunded = set(Ticket.objects.filter(status="refunded").values_list("pk", flat=True))
        sent = Counter(re.findall(r"^X-Refund-Key: (\S+)$", _mail_text(), flags=re.M))
        return {
            "tickets": len(tickets),
            "kills": len(_markers()) + self.outside_kills,
            "kills_inside": len(_markers()),
            "kills_outside": self.outside_kills,
            "refunded": statuses["refunded"],
            "declined": statuses["declined"],
            "rejected": statuses["rejected"],
            "failed": statuses["failed"],
            "lost": len(tickets) - sum(n for s, n in statuses.items() if s in FINAL),
            "double_charges": sum(1 for n in charges.values() if n > 1),
            "missing_charges": len(refunded - set(charges)),
            "charges_without_refund": len(set(charges) - refunded),
            "double_emails": sum(1 for n in sent.values() if n > 1),
            "emails_sent": sum(sent.values()),
            "settled": settled,
            "seconds": round(seconds, 1),
            "seed": self.opts["seed"],
            "backend": self.opts["backend"],
            "workers": self.opts["workers"],
        }


def _markers() -> list[str]:
    from refunds.faults import fired

    return fired(settings.REFUNDS_CRASH_PLAN)


def _mail_text() -> str:
    folder = Path(settings.EMAIL_FILE_PATH)
    if not folder.exists():
        return ""
    return "\n".join(p.read_text(errors="replace") for p in folder.iterdir() if p.is_file())
