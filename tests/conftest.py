"""Fixtures: personas, the broker, real Celery worker processes on the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection

from refunds import embedded_redis
from refunds.models import Order

ROOT = Path(__file__).resolve().parent.parent


# --- personas and orders -----------------------------------------------------------------------
def _persona(username: str, group: str, **flags) -> User:
    user = User.objects.create_user(username, password="pw", **flags)
    user.groups.add(Group.objects.get_or_create(name=group)[0])  # a transactional test flushes them
    return user


@pytest.fixture
def agent(db) -> User:
    return _persona("agent", "Support agents")


@pytest.fixture
def manager(db) -> User:
    return _persona("manager", "Managers")


@pytest.fixture
def admin_user(db) -> User:
    return _persona("admin", "Admins", is_staff=True, is_superuser=True)


def make_order(number: str, *, late: int = 4, fee_cents: int = 699, name: str = "Ana Souza") -> Order:
    from datetime import date, timedelta

    promised = date(2026, 11, 2)
    return Order.objects.create(
        number=number,
        customer_name=name,
        customer_email=f"{name.split()[0].lower()}@example.com",
        promised_on=promised,
        delivered_on=promised + timedelta(days=late),
        shipping_fee_cents=fee_cents,
    )


@pytest.fixture
def late_order(db) -> Order:
    return make_order("1042", late=4, fee_cents=699)


@pytest.fixture
def big_order(db) -> Order:
    return make_order("1045", late=6, fee_cents=4800, name="Dev Patel")


@pytest.fixture
def on_time_order(db) -> Order:
    return make_order("1043", late=-1, fee_cents=499, name="Ben Okafor")


# --- waiting -----------------------------------------------------------------------------------
def wait_for(predicate: Callable[[], object], *, timeout: float = 30, every: float = 0.1,
             what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# --- the broker and real workers ---------------------------------------------------------------
@pytest.fixture(scope="session")
def django_db_setup(django_db_setup) -> Iterator[None]:
    """pytest-django's test database; its checkpoint pool is closed before the database is
    dropped (PostgreSQL refuses to drop a database that has sessions)."""
    yield
    from refunds import runner

    runner.close_persistence()


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """The broker the workers use: the embedded Redis, started here, or the configured one."""
    proc = None
    if settings.USES_EMBEDDED_BROKER and not embedded_redis.is_running(settings.EMBEDDED_REDIS_SOCKET):
        proc = embedded_redis.start(settings.EMBEDDED_REDIS_SOCKET)
    yield settings.CELERY_BROKER_URL
    if proc is not None:
        proc.terminate()
        proc.wait(timeout=10)


def purge_broker() -> None:
    from config.celery_app import app

    with app.connection_for_write() as conn:
        conn.default_channel.client.flushdb()


def database_url() -> str:
    """The test database, as a URL a worker process can open."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Worker:
    """A real `celery worker` process (its own session, so a kill takes the pool child too)."""

    def __init__(self, name: str, log_dir: Path, *, pool: str = "prefork", concurrency: int = 1,
                 env: dict[str, str] | None = None):
        self.name, self.pool, self.concurrency = name, pool, concurrency
        self.log = log_dir / f"{name}.log"
        self.env = {**os.environ, "DATABASE_URL": database_url(), **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self, *, wait: bool = True) -> Worker:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "-l", "info",
             "-P", self.pool, "-c", str(self.concurrency), "-n", f"{self.name}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
        if wait:
            wait_for(lambda: b"ready." in self.log.read_bytes() or self.proc.poll() is not None,
                     timeout=60, what=f"worker {self.name} to start")
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the whole worker: main process and pool children, no cleanup."""
        if self.alive:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.alive:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        elif self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # orphaned pool children, if any
            except ProcessLookupError:
                pass

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def workers(broker, transactional_db, tmp_path) -> Iterator[Callable[..., Worker]]:
    """Start real workers on the test database: `workers("w1", env={...})`."""
    purge_broker()
    started: list[Worker] = []

    def start(name: str = "w1", **kwargs) -> Worker:
        worker = Worker(name, tmp_path, **kwargs).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
    purge_broker()


@pytest.fixture(autouse=True)
def _forget_customers(request) -> None:
    """The LangGraph store outlives Django's per-test flush (and the test run); empty it so an
    earlier test's refunds do not flag this test's customer as a repeat refunder."""
    if "transactional_db" not in request.fixturenames and "live_server" not in request.fixturenames:
        return
    request.getfixturevalue("transactional_db")
    from refunds import runner

    store = runner._persistence(os.getpid())[1]
    if hasattr(store.conn, "execute") and not hasattr(store.conn, "connection"):  # SqliteStore
        store.conn.execute("DELETE FROM store")
    else:  # PostgresStore over a pool
        with store.conn.connection() as conn:
            conn.execute("DELETE FROM store")


@pytest.fixture(autouse=True)
def _fast_passwords(settings) -> None:
    # The default hasher costs about half a second per persona; tests need no real hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
