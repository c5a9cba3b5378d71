"""A shift's load on one box: N reviewers at once, customers' messages coming in and the workers
paying refunds, all on this machine (Locust, headless, against gunicorn on PostgreSQL + Redis).

    .venv/bin/python bench/load.py                         # 10, 25, 50, 100 reviewers, ~12 min
    .venv/bin/python bench/load.py --reviewers 50 --seconds 120 --message-rate 2
    .venv/bin/python bench/load.py --reviewers 10,50,100 --nodes 2 --push   # nginx, two nodes

The script starts everything itself, in a fresh PostgreSQL database (BENCH_PG_DB, dropped after)
and the Redis db of BENCH_REDIS_URL (flushed): the Procfile's processes but `release` (gunicorn
with its workers, the threads, intake and housekeeping Celery workers, beat), each as the
Procfile says with its defaults (WEB_CONCURRENCY and the like pass through), on a free port.
Then, per step of the sweep, after a run with no reviewers and one with one:

1. a backlog of reviews waits, about as many as the step's reviewers decide in it (opened
   before the step's clock starts, so a queue is never empty for want of mail);
2. `locust --headless --csv` for `--seconds` (bench/load_users.py): N reviewers, agents and
   managers two to one, logged in, each polling its queue as the page does (2 s after a change,
   doubling to 30 s while none; with `--push` on the events stream's rings) and
   approving one review every 20-60 s from the queue page it loads; one helpdesk hands in a
   message at `--message-rate` per second through POST /api/messages/ (API token);
3. meanwhile, a third of the way in, the driver opens `--batch` tickets and approves each as it
   reaches its review: the time until all are refunded is the workers' throughput (refunds per
   minute) under that web load, set against the same batch in the run with no reviewers;
4. figures from Locust's CSV (polls/s, p50/p95) and from the database's own timestamps:
   decision -> refunded (Decision.decided_at -> the refunded Ticket's updated_at) and
   message -> ticket in the queue (Message.received_at -> Ticket.review_since).

First, on a quiet desk, `--idle` decisions one at a time (decision -> refunded idle p50) and
one reviewer alone loading the queue page `--idle` times, then its unchanged poll (the queue's
one-reviewer p50): the targets divide by these. Each step also says where the 2 CPUs went (CPU
seconds of each Procfile process, PostgreSQL, Redis and Locust, per second of the step), and the
targets' step (50 reviewers) is sampled by py-spy for `--profile` seconds in the web and the
threads worker: where their samples' leaf frames are, by library, and the app's functions on
the stack. Everything lands in bench/results/load-<time>.json, the chart of p95 against
reviewers in bench/results/load-<time>.png (matplotlib), and the CSVs, the processes' logs and
py-spy's raw samples in bench/results/load-<time>/.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    REDIS_URL,
    RESULTS,
    ROOT,
    drop_postgres_db,
    machine,
    pct,
    prepare_environment,
    redis_client,
    say,
    wait_for,
    write_results,
)

DEFAULT_SWEEP = "10,25,50,100"
AT = 50  # the targets hold at this many reviewers (issue 34)
TARGETS = {
    "queue p95 / its p50 with one reviewer": 3.0,  # at most
    "decision -> refunded p95 / its idle p50": 2.0,  # at most
    "workers' refunds per minute / with no reviewers": 0.8,  # at least
    # Issue 46: what a poll costs follows what changed, and so does a reviewer's share of web.
    "a changed poll's web CPU / an unchanged one's": 2.0,  # at most
    "web CPU per reviewer-minute / at 10 reviewers": 1.0,  # at most
}
POLL = 0.05


# --- the processes ---------------------------------------------------------------------------
class Procfile:
    """The Procfile's processes but `release`, each started as the Procfile says (in its own
    process group, the virtualenv first on PATH), stopped with SIGTERM then SIGKILL."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env, self.log_dir = env, log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def entries() -> dict[str, str]:
        out = {}
        for line in (ROOT / "Procfile").read_text().splitlines():
            name, _, command = line.partition(":")
            if command.strip() and not line.startswith("#"):
                out[name.strip()] = command.strip()
        return out

    def start(self) -> None:
        for name, command in self.entries().items():
            if name == "release":
                continue
            with (self.log_dir / f"{name}.log").open("ab") as out:
                self.procs[name] = subprocess.Popen(
                    ["bash", "-c", f"exec {command}"],
                    cwd=ROOT,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

    def start_one(self, name: str, command: str, **env: str) -> None:
        """Another process beside the Procfile's (a second web node, the proxy)."""
        with (self.log_dir / f"{name}.log").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=ROOT,
                env={**self.env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_ready(self, url: str, timeout: float = 120) -> None:
        def web_up() -> bool:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return False

        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {self.log(name)[-2000:]}")
        wait_for(web_up, timeout=timeout, what="gunicorn to answer", every=0.5)
        for name in self.procs:
            if name in ("web", "web2", "beat", "events", "nginx"):
                continue
            wait_for(
                lambda name=name: " ready." in self.log(name),
                timeout=timeout,
                what=f"the {name} worker to be ready",
                every=0.5,
            )

    def errors(self) -> dict[str, int]:
        """Tracebacks and ERROR lines in each process's log (the web's access lines aside)."""
        return {
            name: sum(
                1
                for line in self.log(name).splitlines()
                if "Traceback" in line or '"level": "ERROR"' in line or " ERROR/" in line
            )
            for name in self.procs
        }

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# --- where the time goes -----------------------------------------------------------------------
TICK = os.sysconf("SC_CLK_TCK")


def two_nodes(procs: Procfile, data_dir: Path, port: int, events_port: int) -> str:
    """Start the web's second node and Debian's nginx with the shipped deploy/nginx.conf (its
    ports swapped for this run's) round-robin over both; the proxy's URL."""
    second, proxy = free_port(), free_port()
    procs.start_one("web2", Procfile.entries()["web"], PORT=str(second))
    wait_for(lambda: port_open(second), timeout=120, what="the second web node", every=0.5)
    prefix = data_dir / "nginx"
    prefix.mkdir()
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    for shipped, now in {"8000": port, "8002": second, "8001": events_port, "8080": proxy}.items():
        conf = conf.replace(f"127.0.0.1:{shipped};", f"127.0.0.1:{now};")
    (prefix / "nginx.conf").write_text(conf)
    user = " user root;" if os.geteuid() == 0 else ""  # root's workers would be nobody
    procs.start_one("nginx", f"/usr/sbin/nginx -p {prefix} -c nginx.conf -g 'daemon off;{user}'")
    wait_for(lambda: port_open(proxy), timeout=30, what="nginx", every=0.2)
    return f"http://127.0.0.1:{proxy}"


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def web_cpus(step: dict) -> float:
    """CPUs the web served the step with: every node, and the events process."""
    return sum(step["cpus_busy"].get(name, 0.0) for name in ("web", "web2", "events", "nginx"))


def cpu_seconds(groups: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) so far of each named process group's live processes, of
    PostgreSQL's and Redis's servers, and of the whole machine: where a 2-core box's time goes.
    PostgreSQL's count includes the backends that ended (the postmaster's reaped children)."""
    out: dict[str, float] = dict.fromkeys([*groups, "postgres", "redis"], 0.0)
    by_group = {pgid: name for name, pgid in groups.items()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        command, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1]
        values = fields.split()
        pgid, used = int(values[2]), (int(values[11]) + int(values[12])) / TICK
        if pgid in by_group:
            out[by_group[pgid]] += used
        elif command in ("postgres", "postmaster"):
            out["postgres"] += used + (int(values[13]) + int(values[14])) / TICK
        elif command.startswith("redis-server"):
            out["redis"] += used
    # The machine: every CPU's busy time (user, nice, system, irq, softirq, steal).
    ticks = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    out["the whole machine"] = sum(int(ticks[i]) for i in (0, 1, 2, 5, 6, 7)) / TICK
    return out


BUCKETS = (  # a sample's leaf-most frame under one of these is counted there (first match)
    ("psycopg/", "the database driver (psycopg)"),
    ("psycopg_pool/", "the database driver (psycopg)"),
    ("django/template/", "templates"),
    ("django/contrib/sessions/", "sessions"),
    ("django/contrib/auth/", "auth"),
    ("django/db/models/sql/", "the ORM compiling SQL"),
    ("django/db/", "the ORM (rows to objects)"),
    ("langgraph/", "LangGraph"),
    ("kombu/", "Celery's broker (kombu, redis-py)"),
    ("redis/", "Celery's broker (kombu, redis-py)"),
    ("celery/", "Celery"),
    ("gunicorn/", "gunicorn (waiting for a request)"),
    ("django/", "Django (the rest)"),
)
# The project's own packages: py-spy names a frame's file relative to its sys.path entry
# ("refunds/selectors.py"), as it does a library's ("django/db/models/query.py").
APP = tuple(
    f"{d.name}/" for d in ROOT.iterdir() if (d / "__init__.py").exists() and d.name != "bench"
)


def py_spy_start(pids: dict[str, int], seconds: int, out_dir: Path) -> dict:
    """Sample each named process tree with py-spy for `seconds` (CPU only: idle threads left
    out); py_spy_collect says where its samples' leaf frames are: by library, and the app's own
    functions (by the share of samples they are on the stack of)."""
    spy = Path(sys.executable).parent / "py-spy"
    running = {}
    for name, pid in pids.items():
        raw = out_dir / f"profile-{name}.txt"
        running[name] = (
            raw,
            subprocess.Popen(
                [str(spy), "record", "--pid", str(pid), "--subprocesses", "--nonblocking"]
                + ["--rate", "100", "--duration", str(seconds), "--format", "raw"]
                + ["--output", str(raw)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            ),
        )
    return running


def py_spy_collect(running: dict) -> dict[str, dict]:
    out = {}
    for name, (raw, proc) in running.items():
        proc.wait(timeout=120)
        out[name] = summarize_profile(raw)
    return out


def summarize_profile(raw: Path) -> dict:
    """py-spy's raw samples ("process ...;frame;...;leaf count", a frame "function (file:line)"):
    the share of samples whose leaf-most frame is in each library (the app's own code when no
    library matches), and the app's functions by the share of samples they are on the stack of."""
    by_bucket: dict[str, int] = {}
    ours: dict[str, int] = {}
    total = 0
    text = raw.read_text() if raw.exists() else ""
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [
            (frame.rsplit(" (", 1)[0], frame.rsplit(" (", 1)[1].rstrip(")"))
            for frame in stack.split(";")
            if " (" in frame and not frame.startswith("process ")
        ]
        bucket = "the app's own code"
        for _, where in reversed(frames):
            found = next((b for key, b in BUCKETS if where.startswith(key)), None)
            if found or where.startswith(APP):
                bucket = found or bucket
                break
        else:
            bucket = "Python's standard library and the rest"
        by_bucket[bucket] = by_bucket.get(bucket, 0) + n
        seen = set()
        for function, where in frames:
            if where.startswith(APP):
                name = f"{function} ({where.split(':')[0]})"
                if name not in seen:
                    seen.add(name)
                    ours[name] = ours.get(name, 0) + n
    share = {k: round(v / total, 3) for k, v in sorted(by_bucket.items(), key=lambda kv: -kv[1])}
    top = sorted(ours.items(), key=lambda kv: -kv[1])[:12]
    return {
        "samples": total,
        "leaf_by_library": share,
        "app_functions_on_stack": {k: round(v / total, 3) for k, v in top} if total else {},
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the desk's people, orders and tickets -----------------------------------------------------
class Desk:
    def __init__(self, max_reviewers: int):
        from django.contrib.auth.models import Group, User

        from api.models import ApiToken

        agents = Group.objects.get_or_create(name="Support agents")[0]
        managers = Group.objects.get_or_create(name="Managers")[0]
        self.reviewers = []
        for n in range(max_reviewers):
            role = "manager" if n % 3 == 2 else "agent"  # two agents to a manager
            user = User.objects.create_user(f"{role}{n}", password=None)
            user.groups.add(managers if role == "manager" else agents)
            self.reviewers.append((user, role))
        helpdesk = User.objects.create_user("helpdesk", password=None)
        helpdesk.groups.add(agents)
        self.token = ApiToken.issue(helpdesk)[1]
        self.driver = User.objects.create_superuser("bench-driver", password=None)
        self.decided: set[int] = set()
        self._orders = 0

    def sessions(self, count: int) -> list[dict]:
        """A logged-in session per reviewer, as the login form leaves one (no password hashing:
        a hundred PBKDF2 logins would be the benchmark)."""
        from importlib import import_module

        from django.conf import settings
        from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

        engine = import_module(settings.SESSION_ENGINE)
        out = []
        for user, role in self.reviewers[:count]:
            session = engine.SessionStore()
            session[SESSION_KEY] = str(user.pk)
            session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
            session[HASH_SESSION_KEY] = user.get_session_auth_hash()
            session.save()
            out.append({"session": session.session_key, "role": role, "user": user.pk})
        return out

    def orders(self, count: int, prefix: str) -> list[dict]:
        """Late orders of their own customers; two in three at an agent's fee, one a manager's."""
        from datetime import date

        from refunds.models import Order
        from refunds.policy import agent_limit_cents

        limit = agent_limit_cents()
        promised = date(2026, 11, 2)
        out = []
        for _ in range(count):
            i = self._orders = self._orders + 1
            fee = 500 + (i * 37) % 1400 if i % 3 else limit + 500 + (i * 53) % limit
            out.append(
                {
                    "number": f"{prefix}{100000 + i}",
                    "name": f"Customer {i}",
                    "email": f"customer{i}@example.com",
                    "fee": fee,
                }
            )
        Order.objects.bulk_create(
            Order(
                number=o["number"],
                customer_name=o["name"],
                customer_email=o["email"],
                promised_on=promised,
                delivered_on=promised + timedelta(days=6),
                shipping_fee_cents=o["fee"],
            )
            for o in out
        )
        return out

    def open(self, orders: list[dict]) -> list[int]:
        from refunds import services

        return [services.ticket_open(order_number=o["number"], note="late").pk for o in orders]

    def decide_pending(self, ids: list[int]) -> int:
        from refunds import services
        from refunds.models import Ticket

        count = 0
        pending = Ticket.objects.awaiting().filter(pk__in=ids).exclude(pk__in=self.decided)
        for ticket in pending.only("pk", "pending_interrupt_id", "required_role", "status"):
            try:
                services.ticket_decide(
                    ticket=ticket,
                    interrupt_id=ticket.pending_interrupt_id,
                    orders=services.review_answers(ticket, answer="approve"),
                    reviewer=self.driver,
                )
            except services.AlreadyDecided:
                pass  # a reviewer took it first: it is paid all the same
            self.decided.add(ticket.pk)
            count += 1
        return count


def refunded(ids: list[int]) -> int:
    from refunds.models import Ticket

    failed = Ticket.objects.filter(pk__in=ids, status=Ticket.Status.FAILED).count()
    if failed:
        raise RuntimeError(f"{failed} ticket(s) failed")
    return Ticket.objects.filter(pk__in=ids, status=Ticket.Status.REFUNDED).count()


def awaiting(ids: list[int]) -> int:
    from refunds.models import Ticket

    return Ticket.objects.awaiting().filter(pk__in=ids).count()


def idle_latency(desk: Desk, count: int) -> dict:
    """Decisions one at a time on a quiet desk: decision -> refunded from the rows' stamps."""
    ids = []
    for order in desk.orders(count, "I"):
        (ticket_id,) = desk.open([order])
        wait_for(lambda t=ticket_id: awaiting([t]), timeout=60, what="the review", every=POLL)
        time.sleep(0.05)  # the worker releases its lease: an idle queue
        desk.decide_pending([ticket_id])
        wait_for(lambda t=ticket_id: refunded([t]), timeout=60, what="the refund", every=POLL)
        ids.append(ticket_id)
    rows = decided_to_refunded(ticket_ids=ids)
    return {"decisions": len(rows), "p50_ms": pct(rows, 50), "p95_ms": pct(rows, 95)}


def idle_pages(desk: Desk, url: str, count: int, procs: Procfile) -> dict:
    """One reviewer alone on the desk: the queue page loaded `count` times one after another,
    then its poll as the page sends it (bench/queue_client.py), `count` times unchanged (a 204)
    and `count` times with one card changed in between (a claim taken or let go): the web's CPU
    seconds and the times of each. The queue's one-reviewer p50 the targets divide by (a
    reviewer in the sweep loads the page only to decide, a few times a minute: too few loads to
    trust its p50)."""
    import urllib.parse
    import urllib.request

    from django.utils import timezone

    from bench.queue_client import Screen
    from refunds.models import Ticket

    page_of = desk.open(desk.orders(25, "P"))  # a page of reviews waits
    wait_for(lambda: awaiting(page_of) == len(page_of), timeout=120, what="a page of reviews")
    session = desk.sessions(1)[0]["session"]
    htmx = {"HX-Request": "true", "HX-Target": "queue-foot", "HX-Current-URL": url + "/"}
    screen = Screen()

    def get(path: str, headers: dict[str, str] | None = None) -> tuple[float, int, str]:
        request = urllib.request.Request(
            url + path, headers={"Cookie": f"sessionid={session}", **(headers or {})}
        )
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read().decode()
        return (time.perf_counter() - started) * 1000, response.status, body

    def poll() -> float:
        ms, status, body = get("/?" + urllib.parse.urlencode(screen.params()), htmx)
        screen.apply(status, body)
        return ms

    def web_cpu() -> float:  # every node's (nginx sends each request to one of them)
        nodes = {name: procs.procs[name].pid for name in ("web", "web2") if name in procs.procs}
        return sum(cpu_seconds(nodes)[name] for name in nodes)

    get("/")  # the first request of a worker process warms its caches
    pages = [get("/") for _ in range(count)]
    screen.load(pages[-1][2])
    poll()  # the clock's bucket may have turned since the page
    used = web_cpu()
    unchanged = [poll() for _ in range(count)]
    assert screen.delay > 2, "the unchanged polls were 204s"
    unchanged_cpu = (web_cpu() - used) / count
    one = Ticket.objects.filter(pk=page_of[len(page_of) // 2])
    changed, used = [], web_cpu()
    for n in range(count):
        held = desk.driver if n % 2 == 0 else None
        until = timezone.now() + timedelta(minutes=5) if held else None
        one.update(claimed_by=held, claim_expires_at=until)
        changed.append(poll())
    changed_cpu = (web_cpu() - used) / count
    page_ms = sorted(ms for ms, _, _ in pages)
    return {
        "loads": count,
        "queue_p50_ms": pct(page_ms, 50),
        "queue_p95_ms": pct(page_ms, 95),
        "poll_p50_ms": pct(sorted(unchanged), 50),
        "poll_p95_ms": pct(sorted(unchanged), 95),
        "changed_poll_p50_ms": pct(sorted(changed), 50),
        "changed_poll_p95_ms": pct(sorted(changed), 95),
        "unchanged_poll_web_cpu_ms": unchanged_cpu * 1000,
        "changed_poll_web_cpu_ms": changed_cpu * 1000,
    }


def decided_to_refunded(*, ticket_ids=None, reviewers=None, since=None) -> list[float]:
    from refunds.models import Decision, Ticket

    rows = Decision.objects.filter(ticket__status=Ticket.Status.REFUNDED, answer="approve")
    if ticket_ids is not None:
        rows = rows.filter(ticket_id__in=ticket_ids)
    if reviewers is not None:
        rows = rows.filter(reviewer_id__in=reviewers)
    if since is not None:
        rows = rows.filter(decided_at__gte=since)
    pairs = rows.values_list("decided_at", "ticket__updated_at")
    return sorted((done - decided).total_seconds() * 1000 for decided, done in pairs)


def message_to_queue(numbers: list[str]) -> tuple[list[float], int]:
    """Message received -> its ticket waiting in the queue, for the step's messages; and how
    many of them opened no ticket (misread, or not yet placed)."""
    from intake.models import Message

    messages = Message.objects.filter(
        ticket__order__number__in=numbers, ticket__review_since__isnull=False
    ).values_list("received_at", "ticket__review_since")
    times = sorted((queued - received).total_seconds() * 1000 for received, queued in messages)
    return times, len(numbers) - len(times)


# --- one step of the sweep ----------------------------------------------------------------------
def locust_stats(prefix: Path) -> dict[str, dict]:
    path = Path(f"{prefix}_stats.csv")
    if not path.exists():
        return {}
    out = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            out[row["Name"]] = {
                "requests": int(row["Request Count"]),
                "failures": int(row["Failure Count"]),
                "per_s": float(row["Requests/s"]),
                "p50_ms": float(row["50%"] or "nan"),
                "p95_ms": float(row["95%"] or "nan"),
            }
    return out


def run_step(desk: Desk, reviewers: int, args, url: str, out_dir: Path, procs: Procfile) -> dict:
    from django.utils import timezone

    label = f"{reviewers} reviewer{'s' if reviewers != 1 else ''}"
    # About what the step's reviewers decide, less what the messages bring: the queue never
    # runs dry for want of mail (a shift starts with yesterday's backlog).
    low, high = (float(x) for x in args.decide_every.split(","))
    expected = int(reviewers * args.seconds / ((low + high) / 2) * 1.5)
    backlog = max(expected - int(args.message_rate * args.seconds), 0)
    if backlog:
        say(f"{label}: a backlog of {backlog} reviews")
        ids = desk.open(desk.orders(backlog, "Q"))
        wait_for(lambda: awaiting(ids) == len(ids), timeout=600, what="the backlog", every=0.2)
    messages = desk.orders(int(args.message_rate * args.seconds) + 5, "M")
    config = out_dir / f"config-{reviewers}.json"
    config.write_text(
        json.dumps(
            {
                "reviewers": desk.sessions(reviewers),
                "orders": messages,
                "token": desk.token,
                "message_rate": args.message_rate,
                "decide_every": [float(x) for x in args.decide_every.split(",")],
                "session_cookie": "sessionid",
                "events_url": args.events_url,
            }
        )
    )
    prefix = out_dir / f"locust-{reviewers}"
    logged_before = procs.errors()
    cpu_started = os.times()
    groups = {name: proc.pid for name, proc in procs.procs.items()}  # each its own group
    used_before = cpu_seconds(groups)
    command = [
        str(Path(sys.executable).parent / "locust"),
        *("-f", str(ROOT / "bench" / "load_users.py")),
        "--headless",
        *("-u", str(reviewers + 1)),
        *("-r", str(max(reviewers / 5, 1))),
        *("-t", f"{args.seconds}s"),
        *("--host", url),
        *("--csv", str(prefix)),
        "--only-summary",
        *("--stop-timeout", "5"),
        *("--loglevel", "WARNING"),
    ]
    say(f"{label}: locust for {args.seconds} s")
    since = timezone.now()
    started = time.monotonic()
    with (out_dir / f"locust-{reviewers}.log").open("wb") as log:
        locust = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "BENCH_LOAD_CONFIG": str(config), "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        # The workers' throughput under this load: a batch opened and approved a third in.
        while time.monotonic() - started < args.seconds / 3:
            time.sleep(0.1)
        profiling = (
            py_spy_start(
                {"web": groups["web"], "worker": groups["worker"]},
                min(args.profile, args.seconds // 2),
                out_dir,
            )
            if args.profile and reviewers == profile_at(args)
            else {}
        )
        batch_ids = desk.open(desk.orders(args.batch, "W"))
        batch_started = time.perf_counter()
        deadline = time.monotonic() + 600
        while refunded(batch_ids) < len(batch_ids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: the batch was not refunded in 600 s")
            if not desk.decide_pending(batch_ids):
                time.sleep(POLL)
        batch_seconds = time.perf_counter() - batch_started
        locust.wait(timeout=args.seconds + 120)
    finally:
        if locust.poll() is None:
            locust.kill()
            locust.wait()
    elapsed = time.monotonic() - started
    used_after = cpu_seconds(groups)
    cpu_share = {
        name: round((used_after[name] - used_before.get(name, 0.0)) / elapsed, 3)
        for name in used_after
    }  # CPUs busy on average; the box has os.cpu_count()
    profile = py_spy_collect(profiling)  # py-spy sampled a part of the step: it has ended
    cpu = os.times()  # Locust's and py-spy's CPU: the children this process waited for
    children = cpu.children_user - cpu_started.children_user
    children += cpu.children_system - cpu_started.children_system
    cpu_share["locust and py-spy"] = round(children / elapsed, 3)
    # What the step's reviewers decided is paid, its messages placed: a bounded wait.
    ids_reviewed = [u["user"] for u in json.loads(config.read_text())["reviewers"]]
    numbers = [m["number"] for m in messages]

    def settled() -> bool:
        from intake.models import Message
        from refunds.models import Decision, Ticket

        open_decisions = Decision.objects.filter(
            reviewer_id__in=ids_reviewed, decided_at__gte=since, applied_at__isnull=True
        ).exclude(ticket__status__in=[Ticket.Status.REFUNDED, Ticket.Status.FAILED])
        unread = Message.objects.filter(status=Message.Status.RECEIVED)
        return not open_decisions.exists() and not unread.exists()

    try:
        wait_for(settled, timeout=120, what="the step's decisions and messages", every=0.5)
    except Exception as exc:  # noqa: BLE001 - reported in the figures, not fatal
        say(f"{label}: {exc}")
    stats = locust_stats(prefix)
    to_refund = decided_to_refunded(reviewers=ids_reviewed, since=since)
    to_queue, unplaced = message_to_queue(numbers)
    polls = stats.get("poll rows", {})
    decide = stats.get("decide", {})
    lost = stats.get("decide lost to a colleague", {}).get("requests", 0)
    # Requests that failed, and tracebacks or ERROR lines the processes logged in the step.
    logged = {name: n - logged_before.get(name, 0) for name, n in procs.errors().items()}
    errors = sum(s["failures"] for name, s in stats.items() if name != "Aggregated")
    errors += sum(logged.values())
    cpu = os.times()
    result = {
        "reviewers": reviewers,
        "seconds": elapsed,
        "locust_cpu_s": (cpu.children_user - cpu_started.children_user)
        + (cpu.children_system - cpu_started.children_system),
        "requests": stats,
        "polls_per_s": polls.get("per_s", 0.0),
        "poll_p50_ms": polls.get("p50_ms"),
        "poll_p95_ms": polls.get("p95_ms"),
        "queue_p50_ms": stats.get("queue page", {}).get("p50_ms"),
        "queue_p95_ms": stats.get("queue page", {}).get("p95_ms"),
        "decide_p50_ms": decide.get("p50_ms"),
        "decisions": len(to_refund),
        "decisions_lost_to_a_colleague": lost,
        "decided_to_refunded_p50_ms": pct(to_refund, 50),
        "decided_to_refunded_p95_ms": pct(to_refund, 95),
        "messages": len(numbers),
        "messages_placed": len(to_queue),
        "messages_unplaced": unplaced,
        "message_to_queue_p50_ms": pct(to_queue, 50),
        "message_to_queue_p95_ms": pct(to_queue, 95),
        "errors": errors,
        "batch": len(batch_ids),
        "batch_seconds": batch_seconds,
        "refunds_per_minute": len(batch_ids) * 60 / batch_seconds,
        "process_errors": logged,
        "cpus_busy": cpu_share,
        "profile": profile,
    }
    say(
        f"{label}: {result['polls_per_s']:.1f} polls/s, poll p50/p95 "
        f"{fmt(result['poll_p50_ms'])}/{fmt(result['poll_p95_ms'])} ms, queue "
        f"{fmt(result['queue_p50_ms'])}/{fmt(result['queue_p95_ms'])} ms, decision -> refunded "
        f"{fmt(result['decided_to_refunded_p50_ms'])}/{fmt(result['decided_to_refunded_p95_ms'])}"
        f" ms ({len(to_refund)}), message -> queue {fmt(result['message_to_queue_p50_ms'])}/"
        f"{fmt(result['message_to_queue_p95_ms'])} ms, {errors} errors, "
        f"{result['refunds_per_minute']:.0f} refunds/min"
    )
    busy = ", ".join(f"{name} {share:.2f}" for name, share in cpu_share.items() if share >= 0.01)
    say(f"{label}: CPUs busy (of {os.cpu_count()}): {busy}")
    return result


def profile_at(args) -> int:
    """The step profiled: the targets' (AT reviewers), else the sweep's largest."""
    sweep = [int(n) for n in args.reviewers.split(",")]
    return AT if AT in sweep else max(sweep)


def fmt(value) -> str:
    if value is None or value != value:  # NaN: no sample
        return "-"
    return f"{value:.0f}"


# --- the whole run -----------------------------------------------------------------------------
def run(args) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="bench-load-"))
    prepare_environment(
        "postgres",
        data_dir,
        DEBUG="false",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        LOG_LEVEL="WARNING",
        EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
        REFUNDS_GATEWAY="bench.reference.MemoryGateway",
        # One helpdesk hands in every message: its token's limit is not what is measured.
        API_RATE_PER_TOKEN="100000/minute",
        API_RATE_PER_IP="100000/minute",
    )
    os.environ["CELERY_BROKER_URL"] = REDIS_URL
    redis_client(REDIS_URL).flushdb()
    port, events_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PORT": str(port),
        "EVENTS_PORT": str(events_port),
        "EVENTS_LOG_LEVEL": "warning",
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
    }
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    sweep = [int(n) for n in args.reviewers.split(",")]
    steps = [0, 1, *[n for n in sweep if n > 1]]
    desk = Desk(max(steps))
    out_dir = data_dir / "load"
    out_dir.mkdir()
    procs = Procfile(env, data_dir / "logs")
    say(f"starting the Procfile's processes: {', '.join(procs.entries())} (release run as migrate)")
    procs.start()
    events_url = f"http://127.0.0.1:{events_port}/queue/events/"
    if args.nodes == 2:  # a second web node, and nginx in front of both (deploy/nginx.conf)
        url = two_nodes(procs, data_dir, port, events_port)
        events_url = f"{url}/queue/events/"
    result: dict = {"steps": [], "url": url, "nodes": args.nodes, "push": args.push}
    args.events_url = events_url if args.push else ""
    try:
        procs.wait_ready(url)
        say(f"idle: {args.idle} decisions one at a time")
        result["idle"] = idle_latency(desk, args.idle)
        say(
            f"idle: decision -> refunded p50 {result['idle']['p50_ms']:.0f} ms, "
            f"p95 {result['idle']['p95_ms']:.0f} ms"
        )
        result["idle_pages"] = idle_pages(desk, url, args.idle, procs)
        alone = result["idle_pages"]
        say(
            f"idle: one reviewer's queue page p50 {alone['queue_p50_ms']:.0f} ms, its unchanged "
            f"poll p50 {alone['poll_p50_ms']:.0f} ms; web CPU per poll unchanged "
            f"{alone['unchanged_poll_web_cpu_ms']:.1f} ms, one card changed "
            f"{alone['changed_poll_web_cpu_ms']:.1f} ms"
        )
        for n in steps:
            result["steps"].append(run_step(desk, n, args, url, out_dir, procs))
    finally:
        procs.stop()
        from django.db import connections

        connections.close_all()
        kept = RESULTS / f"load-{time.strftime('%Y%m%d-%H%M%S')}"
        shutil.copytree(out_dir, kept, ignore=shutil.ignore_patterns("config-*.json"))
        shutil.copytree(data_dir / "logs", kept / "logs")
        result["csv_dir"] = str(kept)
        drop_postgres_db()
        shutil.rmtree(data_dir, ignore_errors=True)
    return result


def targets(result: dict) -> list[dict]:
    """Each target per step against the baselines of the same run (they hold at AT reviewers)."""
    steps = {s["reviewers"]: s for s in result["steps"]}
    none = steps.get(0)
    idle = result["idle"]["p50_ms"]
    alone = result["idle_pages"]["queue_p50_ms"]
    out = []
    for n, step in steps.items():
        if n < 2:
            continue
        checks = [
            (
                "queue p95 / its p50 with one reviewer",
                step["queue_p95_ms"] / alone,
            ),
            ("decision -> refunded p95 / its idle p50", step["decided_to_refunded_p95_ms"] / idle),
            (
                "workers' refunds per minute / with no reviewers",
                step["refunds_per_minute"] / none["refunds_per_minute"] if none else float("nan"),
            ),
        ]
        for name, ratio in checks:
            bound = TARGETS[name]
            met = ratio >= bound if name.startswith("workers") else ratio <= bound
            out.append({"reviewers": n, "target": name, "ratio": ratio, "bound": bound, "met": met})
        out.append(
            {"reviewers": n, "target": "errors", "ratio": step["errors"], "bound": 0,
             "met": step["errors"] == 0}
        )  # fmt: skip
        if n > 10 and 10 in steps:
            name = "web CPU per reviewer-minute / at 10 reviewers"
            ratio = (web_cpus(step) / n) / (web_cpus(steps[10]) / 10)
            out.append({"reviewers": n, "target": name, "ratio": ratio, "bound": TARGETS[name],
                        "met": ratio <= TARGETS[name]})  # fmt: skip
    name = "a changed poll's web CPU / an unchanged one's"
    pages = result["idle_pages"]
    ratio = pages["changed_poll_web_cpu_ms"] / max(pages["unchanged_poll_web_cpu_ms"], 1e-3)
    out.append({"reviewers": 1, "target": name, "ratio": ratio, "bound": TARGETS[name],
                "met": ratio <= TARGETS[name]})  # fmt: skip
    return out


def chart(result: dict, path: Path) -> None:
    """The sweep's p95s against reviewers, as a PNG (matplotlib, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    steps = [s for s in result["steps"] if s["reviewers"] >= 1]
    x = [s["reviewers"] for s in steps]
    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    for key, label in (
        ("poll_p95_ms", "queue's poll (2 s after a change, up to 30 s)"),
        ("queue_p95_ms", "queue page"),
        ("decided_to_refunded_p95_ms", "decision -> refunded"),
        ("message_to_queue_p95_ms", "message -> ticket in the queue"),
    ):
        axes.plot(x, [s[key] for s in steps], marker="o", label=label)
    axes.axhline(
        result["idle_pages"]["queue_p50_ms"] * TARGETS["queue p95 / its p50 with one reviewer"],
        color="grey",
        linestyle="--",
        linewidth=1,
        label="queue page's target (3x its p50 alone)",
    )
    axes.set_xlabel("reviewers at once (each polling as the page does, deciding every 20-60 s)")
    axes.set_ylabel("p95, ms")
    axes.set_title("A shift's load on one 2-core box (PostgreSQL, Redis, gunicorn, Celery)")
    axes.set_xticks(x)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def print_table(result: dict) -> None:
    print()
    print(
        f"idle decision -> refunded: p50 {result['idle']['p50_ms']:.0f} ms, "
        f"p95 {result['idle']['p95_ms']:.0f} ms ({result['idle']['decisions']} decisions)"
    )
    alone = result["idle_pages"]
    print(
        f"one reviewer alone ({alone['loads']} loads each): queue page p50 "
        f"{alone['queue_p50_ms']:.0f} ms, p95 {alone['queue_p95_ms']:.0f} ms; unchanged poll p50 "
        f"{alone['poll_p50_ms']:.0f} ms, p95 {alone['poll_p95_ms']:.0f} ms; one card changed "
        f"p50 {alone['changed_poll_p50_ms']:.0f} ms; web CPU per poll "
        f"{alone['unchanged_poll_web_cpu_ms']:.1f} ms unchanged, "
        f"{alone['changed_poll_web_cpu_ms']:.1f} ms changed"
    )
    none = next((s for s in result["steps"] if s["reviewers"] == 0), None)
    print(
        "| reviewers | polls/s | poll p50 / p95 | queue p50 / p95 | decision -> refunded "
        "p50 / p95 (n) | message -> queue p50 / p95 (n) | errors | refunds/min | vs none | "
        "web CPUs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in result["steps"]:
        ratio = s["refunds_per_minute"] / none["refunds_per_minute"] if none else float("nan")
        print(
            f"| {s['reviewers']} | {s['polls_per_s']:.1f} | {fmt(s['poll_p50_ms'])} / "
            f"{fmt(s['poll_p95_ms'])} ms | {fmt(s['queue_p50_ms'])} / {fmt(s['queue_p95_ms'])} "
            f"ms | {fmt(s['decided_to_refunded_p50_ms'])} / "
            f"{fmt(s['decided_to_refunded_p95_ms'])} ms ({s['decisions']}) | "
            f"{fmt(s['message_to_queue_p50_ms'])} / {fmt(s['message_to_queue_p95_ms'])} ms "
            f"({s['messages_placed']}) | {s['errors']} | {s['refunds_per_minute']:.0f} | "
            f"{ratio:.2f} | {web_cpus(s):.2f} |"
        )
    print()
    for s in result["steps"]:
        busy = ", ".join(f"{k} {v:.2f}" for k, v in s["cpus_busy"].items() if v >= 0.01)
        print(f"{s['reviewers']:>4} reviewers, CPUs busy of {os.cpu_count()}: {busy}")
        for name, found in s["profile"].items():
            print(f"     py-spy, {name} ({found['samples']} samples), leaf frames by library:")
            for bucket, share in found["leaf_by_library"].items():
                print(f"       {share:6.1%}  {bucket}")
            print("     the app's functions on the stack:")
            for function, share in found["app_functions_on_stack"].items():
                print(f"       {share:6.1%}  {function}")
    print()
    for t in result["targets"]:
        mark = "met" if t["met"] else "MISSED"
        at = " (the target's step)" if t["reviewers"] == AT else ""
        sign = ">=" if t["target"].startswith("workers") else "<="
        print(
            f"{t['reviewers']:>4} reviewers{at}: {t['target']}: {t['ratio']:.2f} "
            f"(target {sign} {t['bound']}): {mark}"
        )


def main() -> None:
    # A run stopped by SIGTERM (timeout, kill) still stops what it started (the `finally`s).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviewers", default=DEFAULT_SWEEP, help="the sweep: 10,25,50,100")
    parser.add_argument("--seconds", type=int, default=90, help="each step's Locust run")
    parser.add_argument("--message-rate", type=float, default=1.0, help="messages per second")
    parser.add_argument("--batch", type=int, default=40, help="tickets of the throughput probe")
    parser.add_argument("--idle", type=int, default=20, help="idle decisions, one at a time")
    parser.add_argument(
        "--decide-every", default="20,60", help="seconds between a reviewer's decisions: lo,hi"
    )
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1, help="web nodes")
    parser.add_argument(
        "--push", action="store_true", help="reviewers listen to the events stream (push)"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=20,
        help="seconds of py-spy on the web and the threads worker at the targets' step (0: none)",
    )
    args = parser.parse_args()
    info = machine()
    say(
        f"load: reviewers {args.reviewers}, {args.seconds} s a step, {args.message_rate} "
        f"messages/s; {info.get('cpus')} CPUs; Procfile: {shlex.quote(str(ROOT / 'Procfile'))}"
    )
    result = run(args)
    result["targets"] = targets(result)
    print_table(result)
    png = RESULTS / f"load-{time.strftime('%Y%m%d-%H%M%S')}.png"
    chart(result, png)
    result["chart"] = str(png)
    path = write_results(
        "load",
        {
            "command": " ".join(["python", *sys.argv]),
            "machine": info,
            "settings": vars(args),
            "procfile": Procfile.entries(),
            **result,
        },
    )
    say(
        f"wrote {path}, the chart {png} (Locust's CSVs and the processes' logs: "
        f"{result['csv_dir']})"
    )


if __name__ == "__main__":
    main()
