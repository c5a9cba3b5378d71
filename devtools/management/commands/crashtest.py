"""Run tickets through real worker processes while killing and pausing them, and count what went
wrong where it lands: refunds at a payment processor over HTTP, messages at a real SMTP server.

Kills come from inside (os._exit at a named point of a thread: in every node, between nodes,
during a resume, around the gateway call and the SMTP conversation; planned per ticket through
devtools/faults.py) and from outside (SIGKILL of a whole worker, main process and pool
child, at random moments, then a restart). Pauses SIGSTOP a whole worker for longer than the lease
and SIGCONT it after another worker may have taken its thread over. Some orders get a second
ticket once their first one is settled (a helpdesk asking again). A share of the tickets
(`--several`) cover two or three orders of one customer: their checks and charges fan out, and
kills land inside the fan-out too (a task's own point, "charge_order:<order>", or around one
order's gateway call). A share of the tickets (`--messages`) arrive as customers' emails through
the inbound webhook's service, read by the intake workflow in the same workers under the same
kills ("intake:<task>" points); each message must open one ticket and be acknowledged once,
counted at the SMTP server. Outside kills hit only a worker whose pool is ready, and each is
counted by what its worker then held (a task, a lease, a call open at the gateway or the mail
server). Kills and pauses stop when the work is done (every ticket settled, every message
read): those not made by then are not made. Reviewers approve (and sometimes reject) as
reviews appear. A seed makes the plan reproducible. Every run works in its own temporary data
folder and database.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db.models import F, Sum

if TYPE_CHECKING:  # imported where used: the command loads without starting anything
    from devtools.processes import CeleryProcess

CHILD_FLAG = "REFUNDS_CRASHTEST_CHILD"
LEASE_SECONDS = 3.0
# A ticket of one order or several: the fan-outs' nodes, and "<point>:<order>" for one order's
# task or gateway call (devtools/faults.py); "{order}" is one of the ticket's orders (late, so
# charged).
EARLY_POINTS = [
    "check_order",
    "check_order:{order}",
    "after:check_order",
    "gather",
    "after:gather",
]
LATE_POINTS = [
    "after:triage",
    "resume",
    "approve",
    "after:approve",
    "charge_order",
    "charge_order:{order}",
    "gateway:before",
    "gateway:before:{order}",
    "gateway:after",
    "gateway:after:{order}",
    "after:charge_order",
    "settle_charges",
    "after:settle_charges",
    "email",
    "smtp:before",
    "after:email",
]
# The intake's tasks of a message (devtools/faults.py), and its acknowledgment's conversation.
INTAKE_POINTS = [
    f"intake:{task}{end}"
    for task in ("read", "find_orders", "open_ticket", "acknowledge")
    for end in ("", ":done")
] + ["smtp:before"]
# Not planned: "smtp:handed_over" and "smtp:after", kills between handing the final "." over and
# recording the server's answer. That is the one window no SMTP server lets us close
# (docs/guarantees.md, "Mail once"); tests/test_crash.py pins what happens there. A random outside
# kill (or a pause past the send window) can still land in it: such a copy is counted in
# emails_delivered_twice and, only when the worker that sent the copy before it was SIGKILLed or
# stopped inside that window, in emails_twice_in_the_window (see _in_the_window): each copy after
# the first needs a window of its own. Any other copy is a broken promise.
FINAL = {"refunded", "declined", "rejected", "failed"}
# Any of these not 0 fails the run.
BROKEN_PROMISES = (
    "lost",
    "failed_by_crash",
    "double_charges",
    "refunds_per_order_over_balance",
    "lines_refunded_past_bought",
    "approved_orders_not_refunded",
    "orders_refunded_unapproved",
    "paid_but_not_refunded",
    "refunded_without_payment",
    "emails_delivered_twice_unexplained",
    "customers_never_told",
    "messages_lost",
    "messages_placed_not_once",
    "messages_acknowledged_twice_unexplained",
    "messages_never_acknowledged",
    "messages_acknowledged_then_declined",
)


def broken_promises(summary: dict) -> list[str]:
    """The counters of a summary that fail the run: every promise not kept."""
    return [name for name in BROKEN_PROMISES if summary[name]]


class Command(BaseCommand):
    help = "Kill and pause real workers while tickets run; print a JSON summary."

    def add_arguments(self, parser):
        parser.add_argument("--tickets", type=int, default=20)
        parser.add_argument("--kills", type=int, default=10)
        parser.add_argument(
            "--pauses",
            type=int,
            default=0,
            help=f"SIGSTOP a worker for longer than the lease ({LEASE_SECONDS:g} s), then SIGCONT",
        )
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument(
            "--several",
            type=float,
            default=0.33,
            help="the share of tickets that cover two or three orders of one customer (0 to 1)",
        )
        parser.add_argument(
            "--messages",
            type=float,
            default=0.33,
            help="the share of tickets that arrive as customers' emails, read by the intake",
        )
        parser.add_argument(
            "--items",
            type=float,
            default=0.33,
            help="the share of tickets about a damaged item, refunding order lines, not shipping",
        )
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
            help="seconds to wait for every ticket to settle "
            "(default 60 + 2/ticket + 5/pause + 10/outside kill)",
        )
        parser.add_argument("--keep", action="store_true", help="keep the data folder and logs")

    def handle(self, *args, **opts):
        if not (settings.DEMO or settings.REFUNDS_ALLOW_FAKES):
            raise CommandError(
                "crashtest kills workers and drops and recreates the database it is pointed at: "
                "it runs in the demo (REFUNDS_DEMO=true) or where fakes are allowed "
                "(REFUNDS_ALLOW_FAKES=true: the tests, a staging box), never in production."
            )
        for name in ("tickets", "workers"):
            if opts[name] < 1:
                raise CommandError(f"--{name} must be at least 1")
        for name in ("kills", "pauses"):
            if opts[name] < 0:
                raise CommandError(f"--{name} must be 0 or more")
        for name in ("several", "messages", "items"):
            if not 0 <= opts[name] <= 1:
                raise CommandError(f"--{name} must be between 0 and 1 (a share of the tickets)")
        if opts["seed"] is None:
            opts["seed"] = random.randrange(1_000_000)
        if os.environ.get(CHILD_FLAG):
            summary = Run(opts, self.stderr).execute()
            self.stdout.write(json.dumps(summary, indent=2))
            if broken_promises(summary):
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
            "REFUNDS_LEASE_SECONDS": str(LEASE_SECONDS),
            "REFUNDS_SWEEP_SECONDS": "1",
            "REFUNDS_SWEEP_GRACE_SECONDS": "2",
            "REFUNDS_REWAKE_SECONDS": "10",
            "REFUNDS_CRASH_PLAN": str(data / "crash-plan.json"),
            "EMAIL_TIMEOUT": "3",
            "LOG_LEVEL": "WARNING",
        }
        env.pop("CELERY_BROKER_URL", None)
        if opts["backend"] == "postgres":
            _recreate_postgres(opts["database_url"])
            env |= {"DATABASE_URL": opts["database_url"], "CELERY_BROKER_URL": opts["broker_url"]}
        try:
            return subprocess.call(
                [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *child_argv(opts)],
                env=env,
            )
        finally:
            if opts["keep"]:
                self.stderr.write(f"crashtest data kept in {data}")
            else:
                shutil.rmtree(data, ignore_errors=True)


# The options the child's run reads; the parent alone uses the others (PARENT_ONLY) to make the
# child's data folder and database.
RUN_OPTIONS = (
    "tickets",
    "kills",
    "pauses",
    "seed",
    "workers",
    "backend",
    "several",
    "messages",
    "items",
    "timeout",
)
PARENT_ONLY = ("keep", "database_url", "broker_url")


def child_argv(opts: dict) -> list[str]:
    """The command line of the child that runs: every option of the run, as the parent got it
    (one left out runs with its default: `--items 0` once ran a third of damaged items)."""
    argv = ["crashtest"]
    for name in RUN_OPTIONS:
        if opts[name] is not None:
            argv += [f"--{name}", str(opts[name])]
    return argv


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
        self.housekeeping: CeleryProcess | None = None
        self.outside_kills = 0
        self.outside_planned = 0  # the outside kills planned; a run whose work is done stops
        self.leased_groups: set[int] = set()  # workers killed from outside holding a lease
        self.restarts: set[str] = set()  # workers killed from outside, to be started again
        self.died_by_themselves = 0
        self.without_a_ready_worker = 0.0  # seconds no thread worker was ready (up, not paused)
        self.group_kills: list[tuple[float, int]] = []  # (time, process group) of outside kills
        self.group_pauses: list[tuple[float, float, int]] = []  # (SIGSTOP, SIGCONT, group)
        self.pauses = 0
        self.paused: list[tuple[float, CeleryProcess]] = []  # (SIGCONT at, worker)
        self.rejects: set[str] = set()  # order numbers, chosen up front: the seed fixes outcomes
        self.asks_again: set[str] = set()  # orders that get a second ticket once settled
        self.asked_again: set[str] = set()
        # Order number -> its first ticket approves it (late, not rejected): the processor must
        # count exactly one refund for each such order over all its tickets, and none for others.
        self.approved: dict[str, bool] = {}
        self.several_ids: set[int] = set()  # the tickets of several orders
        self.messages: dict[int, list[str]] = {}  # message id -> the orders it names
        self.items: set[str] = set()  # orders whose damaged vases are refunded, not the shipping
        self.events: list[tuple[float, str]] = []  # (time, what) of outside kills and pauses

    def execute(self) -> dict:
        from devtools.fake_processor import FakeProcessor
        from devtools.processes import CeleryProcess
        from devtools.smtp_sink import SmtpSink

        started = time.monotonic()
        call_command("migrate", verbosity=0)
        broker = self._start_broker()
        self.smtp = SmtpSink().start()
        self.gateway = FakeProcessor(answer_late_by=2.0).start()
        tickets = self._open_tickets()
        inside, outside = self._plan_kills(tickets)
        self.outside_planned = outside
        env = {
            **os.environ,
            **self.smtp.env(),
            "EMAIL_BACKEND": "devtools.faults.TracedSmtpBackend",
            **self.gateway.env(timeout=1.0),
        }
        # As in production: the killed and paused workers advance threads and read messages;
        # the sweeps and webhooks run on a housekeeping worker of their own, never killed.
        self.workers = [
            CeleryProcess.worker(f"crash{i}", self.logs, env, queues=_thread_queues())
            for i in range(self.opts["workers"])
        ]
        housekeeping = CeleryProcess.worker("housekeeping", self.logs, env, queues="housekeeping")
        self.housekeeping = housekeeping
        for w in [*self.workers, housekeeping]:
            w.start(wait_ready=True)
        beat = CeleryProcess.beat(self.logs, env).start()
        timeout = self.opts["timeout"] or (
            60 + 2 * len(tickets) + 5 * self.opts["pauses"] + 10 * outside
        )
        try:
            settled = self._drive(outside, deadline=time.monotonic() + timeout)
        finally:
            for _, worker in self.paused:
                worker.signal(signal.SIGCONT)
            for proc in [*self.workers, housekeeping, beat]:
                proc.stop()
            if broker is not None:
                broker.terminate()
            self.smtp.stop()
            self.gateway.stop()
        return self._summary(inside, settled, time.monotonic() - started)

    def _start_broker(self):
        from devtools import embedded_redis

        if settings.USES_EMBEDDED_BROKER:
            return embedded_redis.start(settings.EMBEDDED_REDIS_SOCKET)
        from config.celery_app import app

        with app.connection_for_write() as conn:
            # The crash test's broker is Redis; kombu's stubs type only the base channel.
            conn.default_channel.client.flushdb()  # type: ignore[attr-defined]
        return None

    def _open_tickets(self) -> list[int]:
        from django.contrib.auth.models import Group, User

        from refunds import policy, services
        from refunds.models import Order

        for username, group in (("agent", "Support agents"), ("manager", "Managers")):
            user = User.objects.create_user(username)
            user.groups.add(Group.objects.get(name=group))
        self.opener = User.objects.create_user("helpdesk")
        self.opener.groups.add(Group.objects.get(name="Support agents"))  # no group opens nothing
        promised = date(2026, 11, 2)
        limit = policy.agent_limit_cents()
        ids = []
        for i in range(self.opts["tickets"]):
            if self.rng.random() < self.opts["items"]:
                ids += self._damaged(i, promised)
                continue
            count = self.rng.choice([2, 3]) if self.rng.random() < self.opts["several"] else 1
            # "C000122": the rules reader reads no suffix after a dash ("C00012-2").
            numbers = [f"C{i:05d}"] + [f"C{i:05d}{k}" for k in range(2, count + 1)]
            email = f"customer{i % max(5, self.opts['tickets'] // 3)}@example.com"
            lateness = {}
            for number in numbers:
                late = self.rng.choice([-1, 0, 1, 2, 3, 4, 5, 6, 8])  # about 2 in 9 not late
                fee = self.rng.choice([499, 699, 1250, limit, limit + 1, 3500, 4800])  # both sides
                Order.objects.create(
                    number=number,
                    customer_name=f"Customer {i}",
                    customer_email=email,
                    promised_on=promised,
                    delivered_on=promised + timedelta(days=late),
                    shipping_fee_cents=fee,
                )
                lateness[number] = late
            if self.rng.random() < self.opts["messages"]:
                self._write_in(i, email, numbers)
            else:
                ticket = services.ticket_open(
                    order_numbers=numbers, note="crashtest", opened_by=self.opener
                )
                ids.append(ticket.pk)
                if count > 1:
                    self.several_ids.add(ticket.pk)
            first = numbers[0]
            if self.rng.random() < 0.1:
                self.rejects.add(first)  # the whole ticket: every order of it
            if self.rng.random() < 0.15:
                self.asks_again.add(first)
            for number, late in lateness.items():
                self.approved[number] = late > 0 and first not in self.rejects
        return ids

    def _damaged(self, i: int, promised: date) -> list[int]:
        """An order of vases and a lamp whose customer writes that the vases arrived smashed: the
        intake reads it as damaged and the check proposes the vase line (its units at their
        price), which needs a manager; refunded at the processor line by line. Its ticket opens
        from the message, so no id here."""
        from refunds.models import Order, OrderLine

        number = f"C{i:05d}"
        email = f"customer{i}@example.com"
        vases, price, lamp = self.rng.choice([1, 2, 3]), self.rng.choice([1800, 2400]), 3500
        order = Order.objects.create(
            number=number,
            customer_name=f"Customer {i}",
            customer_email=email,
            promised_on=promised,
            delivered_on=promised,
            shipping_fee_cents=699,
            total_cents=vases * price + lamp + 699,
            paid_cents=vases * price + lamp + 699,
        )
        OrderLine.objects.create(
            order=order,
            line_id="1",
            sku="VASE",
            title="Ceramic vase",
            unit_price_cents=price,
            quantity=vases,
        )
        OrderLine.objects.create(
            order=order,
            line_id="2",
            sku="LAMP",
            title="Table lamp",
            unit_price_cents=lamp,
            quantity=1,
        )
        body = f"The ceramic vase in order {number} arrived smashed into pieces.\n\nCustomer {i}"
        self._receive(i, email, "Broken vase", body, [number])
        self.items.add(number)
        if self.rng.random() < 0.1:
            self.rejects.add(number)
        self.approved[number] = number not in self.rejects
        return []

    def _write_in(self, i: int, email: str, numbers: list[str]) -> None:
        """A customer's email, through the service the inbound webhook calls (intake/inbound.py):
        the intake workflow reads it in a worker and opens its ticket."""
        orders = (
            numbers[0] if len(numbers) == 1 else ", ".join(numbers[:-1]) + " and " + numbers[-1]
        )
        body = (
            f"{'Order' if len(numbers) == 1 else 'My orders'} {orders} arrived 4 days late, "
            f"please refund the shipping.\n\nCustomer {i}"
        )
        self._receive(i, email, "Late delivery", body, numbers)

    def _receive(self, i: int, email: str, subject: str, body: str, numbers: list[str]) -> None:
        from django.utils import timezone

        from intake.models import Message
        from intake.services import message_receive

        message, _ = message_receive(
            channel=Message.Channel.EMAIL,
            key=f"<crashtest-{i}@example.com>",
            sender=email,
            sender_name=f"Customer {i}",
            subject=subject,
            body=body,
            received_at=timezone.now(),
            raw=f"From: {email}\nSubject: {subject}\n\n{body}",
        )
        self.messages[message.pk] = numbers

    def _plan_kills(self, tickets: list[int]) -> tuple[dict, int]:
        from intake.models import Message
        from refunds.models import Ticket

        kills = self.opts["kills"]
        messages = sorted(self.messages)
        inside_count = min(len(tickets) + len(messages), (kills + 1) // 2)
        # Messages, and tickets of several orders, get at least their share of the inside kills
        # (rounded up), so a short run kills inside the intake and the fan-outs too.
        in_messages = math.ceil(inside_count * len(messages) / (len(tickets) + len(messages)))
        in_messages = max(min(len(messages), in_messages), inside_count - len(tickets))
        in_tickets = inside_count - in_messages
        several = [pk for pk in tickets if pk in self.several_ids]
        single = [pk for pk in tickets if pk not in self.several_ids]
        in_several = min(len(several), in_tickets, math.ceil(inside_count * self.opts["several"]))
        in_several = max(in_several, in_tickets - len(single))
        chosen = self.rng.sample(several, in_several)
        chosen += self.rng.sample(single, in_tickets - in_several)
        plan = {}
        killed_messages = self.rng.sample(messages, in_messages)
        for message in Message.objects.filter(pk__in=killed_messages).order_by("pk"):
            plan[message.thread_id] = {"point": self.rng.choice(INTAKE_POINTS), "times": 1}
        for ticket in Ticket.objects.filter(pk__in=chosen).select_related("order"):
            # Points after the review only for tickets that get there, so every kill fires.
            numbers = ticket.order_numbers()
            charged = [n for n in numbers if self.approved[n]]
            point = self.rng.choice(EARLY_POINTS + (LATE_POINTS if charged else []))
            # One order's own point: any order for the checks, a charged one after the review.
            among = charged if point in LATE_POINTS else numbers
            point = point.format(order=self.rng.choice(among))
            plan[ticket.thread_id] = {"point": point, "times": 1}
        Path(settings.REFUNDS_CRASH_PLAN).write_text(json.dumps(plan, indent=1))
        return plan, kills - inside_count

    def _drive(self, outside: int, *, deadline: float) -> bool:
        from refunds.models import Ticket

        pauses = self.opts["pauses"]
        next_kill = time.monotonic() + self.rng.uniform(0.5, 2.0)
        next_pause = time.monotonic() + self.rng.uniform(1.0, 3.0)
        last_report = 0.0
        last = time.monotonic()
        while time.monotonic() < deadline:
            self._review()
            self._ask_again()
            statuses = Counter(Ticket.objects.values_list("status", flat=True))
            total = sum(statuses.values())
            done = sum(n for s, n in statuses.items() if s in FINAL)
            now = time.monotonic()
            if not self._ready_workers():
                self.without_a_ready_worker += now - last
            last = now
            for resume_at, worker in list(self.paused):
                if now >= resume_at:
                    worker.signal(signal.SIGCONT)
                    self.paused.remove((resume_at, worker))
            # Done when the work is, whatever kills and pauses are left: one that lands on a
            # worker with nothing to do tests nothing (19 of 30 once did, after every ticket
            # had settled). A paused worker is woken first, so what it does then is counted.
            if (
                done == total
                and not self._unapplied()
                and not self.paused
                and self.asked_again >= self._settled_asks()
                and not self._messages_unfinished()
            ):
                return True
            # A kill waits for a ready worker: one still starting holds nothing to lose.
            if self.outside_kills < outside and now >= next_kill and self._kill_a_worker():
                next_kill = now + self.rng.uniform(0.5, 2.5)
            if self.pauses < pauses and now >= next_pause:
                self._pause_a_worker(now)
                next_pause = now + self.rng.uniform(1.0, 3.0)
            self._start_dead_workers()
            if now - last_report > 2:
                last_report = now
                self.progress.write(
                    f"crashtest: {done}/{total} settled, kills {len(_markers())} inside + "
                    f"{self.outside_kills} outside, pauses {self.pauses}; "
                    + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()))
                )
            time.sleep(0.1)
        return False

    def _ready_workers(self) -> list[CeleryProcess]:
        """The thread workers whose pool is up and that are not paused."""
        return [w for w in self.workers if w.is_ready() and all(w is not p for _, p in self.paused)]

    def _kill_a_worker(self) -> bool:
        """SIGKILL a ready worker from outside, at a random moment, while another stays ready
        (a restart takes 10-60 s on a loaded machine: killing the last ready worker would leave
        nothing advancing threads, and the next kills nothing to hit); False when it may not."""
        ready = self._ready_workers()
        if len(ready) < min(2, len(self.workers)):
            return False
        worker = self.rng.choice(ready)
        assert worker.proc is not None  # ready: started
        group = worker.proc.pid  # its process group
        if _holds_a_lease(group):
            self.leased_groups.add(group)
        self.group_kills.append((time.time(), group))
        worker.kill()  # main process and pool child
        self.events.append((time.time(), f"SIGKILL {worker.name}"))
        self.outside_kills += 1
        self.restarts.add(worker.name)
        return True

    def _start_dead_workers(self) -> None:
        """Start again, without waiting for it, every worker that is down: killed from outside,
        or died by itself (then counted)."""
        for worker in [*self.workers, *([self.housekeeping] if self.housekeeping else [])]:
            if worker.alive:
                continue
            if worker.name in self.restarts:
                self.restarts.discard(worker.name)
            else:
                self.died_by_themselves += 1
                self.events.append((time.time(), f"{worker.name} died by itself"))
            worker.start()

    def _messages_unfinished(self) -> bool:
        from intake.models import Message

        return Message.objects.filter(pk__in=self.messages, finished_at=None).exists()

    def _pause_a_worker(self, now: float) -> None:
        running = [w for w in self.workers if all(w is not p for _, p in self.paused)]
        if len(running) < 2:  # keep one worker going, or nothing could take a thread over
            return
        worker = self.rng.choice(running)
        worker.signal(signal.SIGSTOP)  # the whole worker, mid-whatever, past its lease
        self.events.append((time.time(), f"SIGSTOP {worker.name}"))
        self.pauses += 1
        pause = LEASE_SECONDS + self.rng.uniform(0.5, 3.0)
        self.paused.append((now + pause, worker))
        self.group_pauses.append((time.time(), time.time() + pause, worker.proc.pid))
        # SIGCONT comes from a timer, not from this loop: a worker stopped inside a write
        # transaction holds SQLite's write lock, and this loop may be waiting on that very lock.
        wake = threading.Timer(pause, worker.signal, (signal.SIGCONT,))
        wake.daemon = True
        wake.start()

    def _settled_asks(self) -> set[str]:
        from refunds.models import Ticket

        return set(
            Ticket.objects.filter(order__number__in=self.asks_again, status__in=FINAL).values_list(
                "order__number", flat=True
            )
        )

    def _ask_again(self) -> None:
        """A helpdesk asks about an order again: while its ticket is open it is refused (the
        one-open-ticket rule), once settled a second ticket is opened."""
        from refunds import services
        from refunds.models import Ticket

        from_messages = {numbers[0] for numbers in self.messages.values()}
        for number in sorted(self.asks_again - self.asked_again):
            if number in from_messages and not Ticket.objects.filter(order__number=number).exists():
                continue  # its message is not read yet: the customer's own ticket comes first
            try:
                services.ticket_open(order_number=number, note="again", opened_by=self.opener)
            except services.TicketAlreadyOpen:
                continue
            self.asked_again.add(number)

    def _unapplied(self) -> bool:
        """Some ticket still needs a worker (a decision not applied yet, a lapsed run)."""
        from refunds.models import Ticket

        return Ticket.objects.needing_worker().exists()

    def _review(self) -> None:
        from django.contrib.auth.models import User

        from refunds import services
        from refunds.models import Ticket

        reviewers = {u.username: u for u in User.objects.filter(username__in=["agent", "manager"])}
        waiting = Ticket.objects.awaiting().exclude(
            decisions__interrupt_id=F("pending_interrupt_id")
        )
        for ticket in waiting.select_related("order"):
            reject = ticket.order.number in self.rejects
            try:
                services.ticket_decide(
                    ticket=ticket,
                    interrupt_id=ticket.pending_interrupt_id,
                    orders=services.review_answers(
                        ticket,
                        answer="reject" if reject else "approve",
                        reason="not covered (crashtest)" if reject else "",
                    ),
                    reviewer=reviewers[ticket.required_role],
                )
            except services.RefundError:
                pass  # the mirror moved on since we read it; the next pass sees the new state

    def _explain_duplicates(self) -> list[dict]:
        """For every copy of a message after its first: when, and what happened around the copy
        before it (its sender's worker killed or stopped between handing the final "." over and
        recording the answer is the one window of mail once). A third copy needs a window of
        its own: the second's sender killed or stopped in it too."""
        from devtools.faults import senders

        steps = senders(settings.REFUNDS_CRASH_PLAN)
        out = []
        for key in self.smtp.delivered_twice():
            copies = sorted((d for d in self.smtp.delivered if d.key == key), key=lambda d: d.at)
            for first, second in itertools.pairwise(copies):
                out.append(self._explained(key, first, second, steps))
        return out

    def _explained(self, key: str, first, second, steps: list) -> dict:
        return {
            "key": key,
            "seconds_apart": round(second.at - first.at, 3),
            "first_answered_after": round(first.at - first.ended_at, 3),
            "in_the_window": _in_the_window(
                key,
                first.ended_at,
                second.ended_at,
                steps,
                self.group_kills,
                self.group_pauses,
            ),
            "around_the_first": _explain(first.ended_at, second.at, self.events),
        }

    def _outside_hits(self) -> dict:
        """How many outside kills interrupted something: a task running in the worker, a lease
        it held (checked just before the kill), a call open at the gateway or the SMTP server
        (devtools/faults.py's log of what each process held)."""
        from devtools.faults import calls, held

        rows = calls(settings.REFUNDS_CRASH_PLAN)
        died = {int(m.split("@")[3]) for m in _markers()}  # pool children killed from inside
        task = in_call = effective = 0
        for _, group in self.group_kills:
            holding = held(rows, group, died=died)
            task += "task" in holding
            in_call += bool(holding & {"gateway", "smtp"})
            effective += bool(holding) or group in self.leased_groups
        kills = len(self.group_kills)
        return {
            "kills_outside_holding_task": task,
            "kills_outside_holding_lease": len(self.leased_groups),
            "kills_outside_in_open_call": in_call,
            "kills_outside_effective": effective,
            "kills_outside_effective_share": round(effective / kills, 2) if kills else 0.0,
        }

    def _messages_summary(self) -> dict:
        """Each customer's email: handled (its intake finished, not left "received"), placed in
        exactly one new ticket for the orders it names, acknowledged once at the SMTP server."""
        from intake.models import Message
        from intake.steps import placed
        from refunds.models import Ticket

        messages = list(Message.objects.filter(pk__in=self.messages))
        delivered = self.smtp.keys()
        lost = [m for m in messages if m.finished_at is None or m.status == Message.Status.RECEIVED]
        # A message that opened a ticket is acknowledged by that ticket (`received`, once a
        # person must look) or told only its outcome (declined at once): never both.
        opened = {m.pk: [t["id"] for t in placed(m)["tickets"] if not t["added"]] for m in messages}
        threads = dict(
            Ticket.objects.filter(pk__in=[i for ids in opened.values() for i in ids]).values_list(
                "pk", "thread_id"
            )
        )
        declined = set(
            Ticket.objects.filter(pk__in=threads, status="declined").values_list("pk", flat=True)
        )

        def keys(m: Message) -> list[str]:
            return [m.ack_key, *(f"{threads[i]}:received" for i in opened[m.pk] if i in threads)]

        def told_at_once(m: Message) -> bool:  # its ticket's checks decided: the outcome alone
            return any(i in declined for i in opened[m.pk])

        once = [
            m
            for m in messages
            if m.status == Message.Status.OPENED
            and [(t["orders"], t["added"]) for t in placed(m)["tickets"]]
            == [(self.messages[m.pk], False)]
        ]
        return {
            "messages": len(messages),
            "messages_lost": len(lost) + len(self.messages) - len(messages),
            "messages_placed_not_once": len(messages) - len(lost) - len(once),
            "messages_never_acknowledged": sum(
                1
                for m in messages
                if not told_at_once(m) and not any(delivered.get(k) for k in keys(m))
            ),
            "messages_told_by_their_outcome_alone": sum(1 for m in messages if told_at_once(m)),
            # An acknowledgment and then a refusal: the customer told two things at once.
            "messages_acknowledged_then_declined": sum(
                1 for m in messages if told_at_once(m) and any(delivered.get(k) for k in keys(m))
            ),
            "acknowledgments_delivered": sum(
                delivered.get(k, 0) for m in messages for k in keys(m)
            ),
            "ack_keys": {k for m in messages for k in keys(m)},
        }

    def _summary(self, plan: dict, settled: bool, seconds: float) -> dict:
        from refunds.models import Order, OrderLine, Ticket

        tickets = list(Ticket.objects.select_related("order").prefetch_related("links__order"))
        statuses = Counter(t.status for t in tickets)
        by_key = {t.thread_id: t for t in tickets}
        # At the processor: refunds per ticket (the reference is the thread id), per order
        by_thread: dict[str, list[int]] = defaultdict(list)
        by_order: dict[str, list[int]] = defaultdict(list)
        # (the key names it: '<thread>:charge_card:<order>:<amount>[:<parts>]'; a one-order
        # ticket's charge before flow version 5 was '<thread>:charge_card:<amount>'); and units
        # per order line, from the parts each refund carries ("11x2,shipping").
        units: Counter[int] = Counter()
        for key, refund in self.gateway.refunds.items():
            by_thread[refund["reference"]].append(refund["amount_cents"])
            ticket = by_key.get(refund["reference"])
            rest = key.removeprefix(refund["reference"] + ":charge_card:").split(":")
            number = rest[0] if len(rest) >= 2 else ticket.order.number if ticket else "?"
            by_order[number].append(refund["amount_cents"])
            for part in filter(None, refund.get("parts", "").split(",")):
                line, _, quantity = part.partition("x")
                if line.isdigit():
                    units[int(line)] += int(quantity or 0)
        bought = dict(OrderLine.objects.values_list("pk", "quantity"))
        # What an order may give back at most: its lines and fee (only the fee for one without
        # lines), and never more than the customer paid where the shop said it.
        lines_total = dict(
            OrderLine.objects.values("order__number")
            .annotate(total=Sum(F("unit_price_cents") * F("quantity") + F("tax_cents")))
            .values_list("order__number", "total")
        )
        fee = {}
        for number, shipping, paid in Order.objects.values_list(
            "number", "shipping_fee_cents", "paid_cents"
        ):
            bought_total = shipping + lines_total.get(number, 0)
            fee[number] = bought_total if paid is None else min(bought_total, paid)
        # A second ticket asks about one order again: it is a ticket of one.
        several = [t for t in tickets if len(t.order_numbers()) > 1]
        messages = self._messages_summary()
        acks = messages.pop("ack_keys")
        delivered = Counter({k: n for k, n in self.smtp.keys().items() if k not in acks})
        twice = self._explain_duplicates()
        acks_twice = [d for d in twice if d["key"] in acks]
        told = {key.split(":")[0] for key in delivered}
        hits = self._outside_hits()
        return {
            "tickets": len(tickets),
            "kills": len(_markers()) + self.outside_kills,
            # Of those, the kills that hit a worker running a task: every inside kill (it fires
            # in one), and the outside kills whose worker held one.
            "kills_on_busy_worker": len(_markers()) + hits["kills_outside_holding_task"],
            "kills_inside": len(_markers()),
            "kills_outside": self.outside_kills,
            "kills_outside_planned": self.outside_planned,
            **hits,
            "seconds_without_a_ready_worker": round(self.without_a_ready_worker, 1),
            "workers_died_by_themselves": self.died_by_themselves,
            # Inside kills planned on a ticket of several orders (that fired).
            "kills_inside_several": sum(
                1 for m in _markers() if m.split("@")[0] in {t.thread_id for t in several}
            ),
            "kills_inside_intake": sum(1 for m in _markers() if m.startswith("intake-")),
            "pauses": self.pauses,
            "refunded": statuses["refunded"],
            "declined": statuses["declined"],
            "rejected": statuses["rejected"],
            "failed": statuses["failed"],
            # No poison tickets in this run: a ticket that ended failed was failed by a crash.
            "failed_by_crash": statuses["failed"],
            "lost": sum(n for s, n in statuses.items() if s not in FINAL),
            "tickets_several": len(several),
            "orders": len(fee),
            "orders_in_tickets_of_several": sum(len(t.order_numbers()) for t in several),
            "orders_approved": sum(self.approved.values()),
            "orders_refunded": len(by_order),
            # Per order, counted at the processor over every ticket of it: more than one refund,
            # more money than its fee or than was paid, an approved order with none, a refund
            # for one not approved.
            "double_charges": sum(1 for amounts in by_order.values() if len(amounts) > 1),
            "refunds_per_order_over_balance": sum(
                1 for number, amounts in by_order.items() if sum(amounts) > fee.get(number, 0)
            ),
            # Per order line, over every refund of it: more units than were bought.
            "lines_refunded_past_bought": sum(
                1 for line, n in units.items() if n > bought.get(line, 0)
            ),
            "orders_refunding_items": len(self.items),
            "orders_refunded_items": sum(1 for number in self.items if by_order.get(number)),
            "line_units_refunded": sum(units.values()),
            "approved_orders_not_refunded": sum(
                1 for number, yes in self.approved.items() if yes and not by_order.get(number)
            ),
            "orders_refunded_unapproved": sum(
                1 for number in by_order if not self.approved.get(number)
            ),
            "paid_but_not_refunded": sum(
                1 for t in tickets if by_thread.get(t.thread_id) and t.status != "refunded"
            ),
            "refunded_without_payment": sum(
                1 for t in tickets if t.status == "refunded" and not by_thread.get(t.thread_id)
            ),
            # The tickets' own emails (the intake's acknowledgments are counted with messages).
            "emails_delivered": sum(delivered.values()),
            "emails_delivered_twice": len(twice) - len(acks_twice),
            "emails_twice_in_the_window": sum(
                1 for d in twice if d["in_the_window"] and d["key"] not in acks
            ),
            "emails_delivered_twice_unexplained": sum(
                1 for d in twice if not d["in_the_window"] and d["key"] not in acks
            ),
            "customers_never_told": sum(
                1 for t in tickets if t.status in FINAL - {"failed"} and t.thread_id not in told
            ),
            **messages,
            "messages_acknowledged_twice": len(acks_twice),
            "messages_acknowledged_twice_in_the_window": sum(
                1 for d in acks_twice if d["in_the_window"]
            ),
            "messages_acknowledged_twice_unexplained": sum(
                1 for d in acks_twice if not d["in_the_window"]
            ),
            "deliveries_twice": twice,
            "gateway_charge_calls": sum(self.gateway.charge_calls.values()),
            "gateway_lookups": sum(self.gateway.lookup_calls.values()),
            "second_tickets": len(self.asked_again),
            "settled": settled,
            "seconds": round(seconds, 1),
            "seed": self.opts["seed"],
            "backend": self.opts["backend"],
            "workers": self.opts["workers"],
        }


def _thread_queues() -> str:
    """The queues (for -Q) that carry the tasks advancing threads and reading messages, as
    CELERY_TASK_ROUTES routes them."""
    from intake.services import TAKE
    from refunds.enqueue import ADVANCE

    routes = settings.CELERY_TASK_ROUTES
    default = settings.CELERY_TASK_DEFAULT_QUEUE
    queues = [routes.get(task, {}).get("queue", default) for task in (ADVANCE, TAKE)]
    return ",".join(dict.fromkeys(queues))


def _holds_a_lease(group: int) -> bool:
    """Whether a process of this worker (process group) holds a lease now: a ticket's or a
    message's, unexpired on the database clock (the owner names its process id)."""
    from django.db.models.functions import Now

    from intake.models import Message
    from refunds.models import Ticket

    owners = [
        *Ticket.objects.filter(lease_expires_at__gt=Now()).values_list("lease_owner", flat=True),
        *Message.objects.filter(lease_expires_at__gt=Now()).values_list("lease_owner", flat=True),
    ]
    for owner in owners:
        try:
            if owner and os.getpgid(int(owner.split(":")[-2])) == group:
                return True
        except (ProcessLookupError, ValueError):
            continue  # a process that died since (an inside kill) holds nothing
    return False


def _in_the_window(
    key: str,
    first_dot: float,
    second_dot: float,
    steps: list[tuple[float, int, int, str, str]],
    group_kills: list[tuple[float, int]],
    group_pauses: list[tuple[float, float, int]],
) -> bool:
    """Whether a second copy of `key` is the one window of mail once: the worker (process group)
    that sent the first copy was SIGKILLed, or SIGSTOPped and still stopped when the second
    copy's sender opened its conversation (paused past the send window), after handing the
    first copy's final "." over and before recording the server's answer.

    `first_dot`, `second_dot`: when each copy's final "." arrived at the server (the SMTP sink's
    log). `steps`: (time, pid, group, key, event) of the workers' mail conversations
    (devtools/faults.py). The first copy's sender is the last to commit its handover
    mark ("handing_over") before the first "." arrived; a kill counts from that mark on (the "."
    left that process, or there would be no copy: this also counts a kill landing between the
    send and the server's read of it), up to its "recorded" step."""
    mine = [s for s in steps if s[3] == key]
    handovers = [s for s in mine if s[4] == "handing_over" and s[0] <= first_dot]
    if not handovers:
        return False
    handed_at, pid, group, _, _ = handovers[-1]
    recorded = [s[0] for s in mine if s[4] == "recorded" and s[1] == pid and s[0] >= handed_at]
    until = min(recorded, default=float("inf"))
    if any(g == group and handed_at <= t < until for t, g in group_kills):
        return True
    takeovers = [
        s[0] for s in mine if s[4] == "connect" and s[2] != group and first_dot < s[0] <= second_dot
    ]
    return any(
        g == group and handed_at <= stop < until and any(stop < t < cont for t in takeovers)
        for stop, cont, g in group_pauses
    )


def _explain(first: float, second: float, events: list[tuple[float, str]]) -> str:
    before = [(t, what) for t, what in events if first - 1 <= t <= second]
    return "; ".join(f"{what} {t - first:+.3f}s" for t, what in before) or "no outside event"


def _markers() -> list[str]:
    from devtools.faults import fired

    return fired(settings.REFUNDS_CRASH_PLAN)
