"""Fixtures: personas, the broker, real Celery worker processes on the test database."""

from __future__ import annotations

import importlib
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.template import Template
from django.test.utils import instrumented_test_render
from template_partials.templatetags.partials import TemplateProxy

from devtools import embedded_redis
from devtools.fake_processor import FakeProcessor
from devtools.localstripe import LocalStripe
from devtools.processes import CeleryProcess
from devtools.processes import wait_for as wait_for  # tests import it from here
from devtools.smtp_sink import SmtpSink
from refunds.models import Order


# --- templates ---------------------------------------------------------------------------------
@pytest.fixture(autouse=True, scope="session")
def _partials_recorded() -> Iterator[None]:
    """A partial rendered on its own (a view's "reviews/queue.html#rows", a `{% partial %}`)
    shows in the test client's `response.templates` and `response.context` as a template file
    does: Django's test setup instruments `Template._render` only, and a partial is a
    TemplateProxy."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TemplateProxy, "_render", instrumented_test_render)
        yield


def templates_rendered(response) -> list[str]:
    """What `response` was rendered from, in order; a partial as "<template>#<partial>"."""
    return [
        t.name if isinstance(t, Template) else f"{t.origin.template_name}#{t.name}"
        for t in response.templates
    ]


# --- the database ------------------------------------------------------------------------------
DATABASE_FIXTURES = {"db", "transactional_db", "live_server", "django_db_reset_sequences"}


def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> None:
    """Refuse a database asked for only at run time (`request.getfixturevalue("agent")`).
    pytest-django builds the test database only for tests that ask for it at collection: such a
    test passes beside one that does and fails alone against the app's own file ("no such
    table"). Failing it every time makes the missing `db` show in any run."""
    if fixturedef.argname not in DATABASE_FIXTURES or not isinstance(request.node, pytest.Item):
        return
    item = request.node
    if DATABASE_FIXTURES & set(item.fixturenames) or item.get_closest_marker("django_db"):
        return
    pytest.fail(
        f"{item.nodeid} reaches the database through a fixture it asks for at run time: "
        "ask for `db` (or `transactional_db`) in its signature",
        pytrace=False,
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fast tier (`bin/test -m "not slow"`) starts no worker: a test that asks for real
    workers without the `slow` mark is refused before anything runs."""
    unmarked = [
        item.nodeid
        for item in items
        if "workers" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("slow")
    ]
    if unmarked:
        raise pytest.UsageError(f"mark these @pytest.mark.slow (they start workers): {unmarked}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test that started real workers shows the end of each one's log in its report:
    CI prints the report and nothing else of the run's temporary directory."""
    report = yield
    started = getattr(item, "funcargs", {}).get("workers")
    if report.failed and isinstance(started, Workers):
        for worker in started:
            report.sections.append((f"worker {worker.name} log (end)", worker.output()[-6000:]))
    return report


# --- personas and orders -----------------------------------------------------------------------
def _persona(username: str, group: str, **flags) -> User:
    user = User.objects.create_user(username, password="pw", **flags)
    user.groups.add(Group.objects.get_or_create(name=group)[0])  # a transactional test flushes them
    return user


@pytest.fixture
def agent(db) -> User:
    return _persona("agent", "Support agents")


@pytest.fixture
def colleague(db) -> User:
    """A second support agent: four-eyes means someone other than the opener decides."""
    return _persona("bea", "Support agents")


@pytest.fixture
def manager(db) -> User:
    return _persona("manager", "Managers")


@pytest.fixture
def admin_user(db) -> User:
    return _persona("admin", "Admins", is_staff=True, is_superuser=True)


def helpdesk() -> User:
    """A helpdesk integration's user (in no desk group): whoever its API token brings in."""
    return User.objects.get_or_create(username="zendesk")[0]


def make_order(
    number: str, *, late: int = 4, fee_cents: int = 699, name: str = "Ana Souza"
) -> Order:
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


# --- the broker and real workers ---------------------------------------------------------------
@pytest.fixture(scope="session")
def django_db_setup(django_db_setup) -> Iterator[None]:
    """pytest-django's test database; its checkpoint pool is closed before the database is
    dropped (PostgreSQL refuses to drop a database that has sessions)."""
    yield
    from refunds import lease, persistence

    lease.stop_keeper()
    persistence.close_persistence()


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """The broker the workers use: the embedded Redis, started here, or the configured one."""
    proc = None
    if settings.USES_EMBEDDED_BROKER and not embedded_redis.is_running(
        settings.EMBEDDED_REDIS_SOCKET
    ):
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


def worker_process(
    name: str,
    log_dir: Path,
    *,
    pool: str = "prefork",
    concurrency: int = 1,
    env: dict[str, str] | None = None,
    queues: str = "",
) -> CeleryProcess:
    """A real `celery worker` on the test database (its own session: a kill takes its child);
    it consumes both queues unless `queues` names some."""
    env = {**os.environ, "DATABASE_URL": database_url(), **(env or {})}
    return CeleryProcess.worker(
        name, log_dir, env, pool=pool, concurrency=concurrency, queues=queues
    )


def beat_process(log_dir: Path, env: dict[str, str] | None = None) -> CeleryProcess:
    return CeleryProcess.beat(
        log_dir, {**os.environ, "DATABASE_URL": database_url(), **(env or {})}
    )


class Sinks:
    """Where the workers' effects land: a real SMTP server and a payment processor over HTTP,
    both counting what reaches them."""

    def __init__(self) -> None:
        self.smtp = SmtpSink().start()
        self.gateway = FakeProcessor().start()

    def env(self) -> dict[str, str]:
        return self.smtp.env() | self.gateway.env()

    def stop(self) -> None:
        self.smtp.stop()
        self.gateway.stop()


@pytest.fixture
def sinks() -> Iterator[Sinks]:
    started = Sinks()
    yield started
    started.stop()


@pytest.fixture
def smtp(settings) -> Iterator[SmtpSink]:
    """A real SMTP server that this process's mail goes to (the workers' go to `sinks.smtp`)."""
    sink = SmtpSink().start()
    for name, value in sink.env().items():
        setattr(settings, name, int(value) if name == "EMAIL_PORT" else value)
    yield sink
    sink.stop()


@pytest.fixture(scope="session")
def localstripe(tmp_path_factory) -> Iterator[LocalStripe]:
    """localstripe, a stateful Stripe emulator, as a real HTTP server on a loopback port for the
    whole session (each test pays with a PaymentIntent of its own); `localstripe.env()` points a
    worker's gateway at it."""
    server = LocalStripe(tmp_path_factory.mktemp("localstripe")).start()
    yield server
    server.stop()


class Workers:
    """Starts real workers on the test database, sending mail to `sinks.smtp` and money through
    `sinks.gateway` (`workers("w1", env={...})`), and remembers every one it started, alive or
    dead: tests/quiescence.py tells a dead worker's unacked message from a running task by it."""

    def __init__(self, log_dir: Path, sinks: Sinks) -> None:
        self.log_dir, self.sinks = log_dir, sinks
        self.started: list[CeleryProcess] = []

    def __call__(
        self, name: str = "w1", *, env: dict[str, str] | None = None, **kwargs
    ) -> CeleryProcess:
        env = self.sinks.env() | (env or {})
        worker = worker_process(name, self.log_dir, env=env, **kwargs).start(wait_ready=True)
        self.started.append(worker)
        return worker

    def __iter__(self) -> Iterator[CeleryProcess]:
        return iter(list(self.started))


@pytest.fixture
def workers(broker, transactional_db, tmp_path, sinks) -> Iterator[Workers]:
    purge_broker()
    started = Workers(tmp_path, sinks)
    yield started
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
    from refunds import persistence

    store = persistence.store()
    if hasattr(store.conn, "execute") and not hasattr(store.conn, "connection"):  # SqliteStore
        store.conn.execute("DELETE FROM store")
    else:  # PostgresStore over a pool
        with store.conn.connection() as conn:
            conn.execute("DELETE FROM store")


@pytest.fixture(autouse=True)
def _card_versions_at_each_statement(request) -> None:
    """On PostgreSQL a card's version is taken at commit (migration 0047's constraint triggers);
    a test run inside a transaction that is rolled back never commits, so there they fire at
    each statement. Tests with transactional_db (the processes, the watcher) commit as the app."""
    marker = request.node.get_closest_marker("django_db")
    transactional = {"transactional_db", "live_server"} & set(request.fixturenames) or (
        marker is not None and marker.kwargs.get("transaction")
    )
    if connection.vendor != "postgresql" or transactional:
        return
    if "db" not in request.fixturenames and marker is None:
        return
    request.getfixturevalue("db")
    made = importlib.import_module("refunds.migrations.0047_card_version")
    with connection.cursor() as cursor:
        cursor.execute(f"SET CONSTRAINTS {', '.join(made.POSTGRES_AT_COMMIT)} IMMEDIATE")


@pytest.fixture(autouse=True)
def _no_push_in_the_test_process(request, settings) -> None:
    """A queue page on the live server would open its events stream there, and the doorbell's
    watcher would run on in the test process after its test; tests of push start their own
    events process (tests/test_browser_push.py sets its URL)."""
    if "live_server" in request.fixturenames:
        settings.REFUNDS_EVENTS_URL = ""


@pytest.fixture(autouse=True)
def _fast_passwords(settings) -> None:
    # The default hasher costs about half a second per persona; tests need no real hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def in_another_session(work: Callable[[], object]) -> threading.Thread:
    """Start `work` in another thread, on a database session of its own (as another process
    would have), closed when the work ends."""

    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@contextmanager
def held_elsewhere(key: str) -> Iterator[None]:
    """Hold the effect lock for `key` from another session, as another process would."""
    from refunds.locks import effect_lock

    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with effect_lock(key) as lock:
            assert lock.held
            taken.set()
            done.wait(30)

    holder = in_another_session(hold)
    assert taken.wait(10)
    try:
        yield
    finally:
        done.set()
        holder.join()


def free_elsewhere(key: str) -> bool:
    """Whether another process could take the effect lock for `key` now (from another session);
    it gives it back at once."""
    from refunds.locks import effect_lock

    answer: list[bool] = []

    def try_it() -> None:
        with effect_lock(key) as lock:
            answer.append(lock.held)

    in_another_session(try_it).join(10)
    return answer == [True]


def give_lines(order: Order, lines: list[tuple[str, int, int]], *, tax_cents: int = 0) -> Order:
    """Give `order` lines (title, unit price in cents, quantity), its total and what was paid,
    as an import with lines would."""
    from refunds.models import OrderLine

    for index, (title, price, quantity) in enumerate(lines, start=1):
        OrderLine.objects.create(
            order=order,
            line_id=f"L{index}",
            sku=f"SKU-{index}",
            title=title,
            unit_price_cents=price,
            quantity=quantity,
            tax_cents=tax_cents,
        )
    order.total_cents = order.shipping_fee_cents + sum(
        line.amount_cents for line in order.lines.all()
    )
    order.paid_cents = order.total_cents
    order.save(update_fields=["total_cents", "paid_cents"])
    return order


@dataclass
class Bucket:
    client: object
    name: str
    endpoint: str

    def keys(self) -> list[str]:
        listed = self.client.list_objects_v2(Bucket=self.name)  # type: ignore[attr-defined]
        return sorted(o["Key"] for o in listed.get("Contents", []))

    def read(self, key: str) -> bytes:
        got = self.client.get_object(Bucket=self.name, Key=key)  # type: ignore[attr-defined]
        return got["Body"].read()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 as a real HTTP server on a free port, for the whole session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_server, settings, monkeypatch) -> Bucket:
    """A new private bucket, and the desk's attachments storage pointed at it as production's
    settings point it (config/storage.py)."""
    import boto3

    from config.storage import attachments_storage

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    name = f"photos-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    settings.REFUNDS_ATTACHMENTS_URL_SECONDS = 30
    settings.STORAGES = settings.STORAGES | {
        "attachments": attachments_storage(
            folder="", bucket=name, endpoint_url=s3_server, region="us-east-1", url_seconds=30
        )
    }
    return Bucket(client, name, s3_server)
