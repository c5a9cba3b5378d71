"""The queue's server-sent events, from a real events process (`python -m config.events`,
uvicorn) on the test database: who may listen, what the first event says, what a change rings
and to whom, and that no customer's data goes down the stream."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from devtools.processes import ROOT, wait_for
from devtools.smtp_sink import free_port
from refunds.models import Ticket
from refunds.selectors import queue_clock
from tests.conftest import _persona, database_url, make_order
from tests.reviewing import awaiting_review
from tests.test_doorbell import card
from tests.test_gunicorn import instance_env

pytestmark = pytest.mark.slow


def session_cookie(user) -> dict[str, str]:
    client = Client()
    client.force_login(user)
    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}


def accepting(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Server:
    """A process of the desk's in its own session, its output in a log file."""

    def __init__(self, command: list[str], log: Path, env: dict[str, str], port: int) -> None:
        self.log, self.port = log, port
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(
            lambda: accepting(port) or self.proc.poll() is not None, timeout=120, what=log.name
        )
        assert self.proc.poll() is None, log.read_text()

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def events_process(tmp_path: Path, **env: str) -> Server:
    port = free_port()
    # This process's secret key: the sessions its test client makes are the events process's.
    environment = instance_env(
        tmp_path,
        DATABASE_URL=database_url(),
        SECRET_KEY=settings.SECRET_KEY,
        EVENTS_PORT=str(port),
        **env,
    )
    command = [sys.executable, "-m", "config.events"]
    return Server(command, tmp_path / f"events-{port}.log", environment, port)


@pytest.fixture
def events(transactional_db, tmp_path) -> Iterator[Server]:
    server = events_process(tmp_path)
    yield server
    server.stop()


class Listener:
    """A reviewer's stream read on a thread: each event as (name, data, raw text)."""

    def __init__(self, url: str, cookies: dict[str, str], headers: dict[str, str] | None = None):
        self.events: queue.Queue = queue.Queue()
        self.comments = 0
        self.client = httpx.Client(cookies=cookies, headers=headers or {}, timeout=30)
        self.response = self.client.send(self.client.build_request("GET", url), stream=True)
        if self.response.status_code == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        name, data, raw = "message", "", ""
        try:
            for line in self.response.iter_lines():
                raw += line + "\n"
                if line.startswith(":"):
                    self.comments += 1
                elif line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif not line and data:
                    self.events.put((name, json.loads(data), raw))
                    name, data, raw = "message", "", ""
        except httpx.HTTPError:
            pass  # closed by the test

    def next(self, timeout: float = 5.0) -> tuple[str, dict, str]:
        return self.events.get(timeout=timeout)

    def close(self) -> None:
        self.response.close()
        self.client.close()


def listen(server: Server, user, **headers: str) -> Listener:
    url = f"http://127.0.0.1:{server.port}/queue/events/"
    return Listener(url, session_cookie(user) if user else {}, headers)


def test_only_a_reviewer_may_listen(events, agent):
    assert listen(events, None).response.status_code == 403
    outsider = _persona("zed", "Helpdesks")
    assert listen(events, outsider).response.status_code == 403
    stream = listen(events, agent)
    assert stream.response.status_code == 200
    assert stream.response.headers["content-type"].startswith("text/event-stream")
    assert stream.response.headers["x-accel-buffering"] == "no"
    stream.close()


def test_the_first_event_is_the_clock_now_and_a_change_rings_its_card(events, agent):
    awaiting_review(make_order("7201"))
    stream = listen(events, agent)
    name, data, _ = stream.next()
    assert (name, data) == ("clock", {"clock": queue_clock()})

    ticket = awaiting_review(make_order("7202"))
    name, data, _ = stream.next()
    assert (name, data) == (
        "cards",
        {"clock": queue_clock(), "cards": [card(ticket)]},
    )
    Ticket.objects.filter(pk=ticket.pk).update(claimed_by=agent)
    name, data, _ = stream.next()
    assert data == {"clock": queue_clock(), "cards": [card(ticket)]}
    stream.close()


def test_an_agents_stream_carries_no_managers_review_unless_it_just_left_theirs(
    events, agent, manager
):
    agents, managers = listen(events, agent), listen(events, manager)
    agents.next(), managers.next()  # the clock
    big = awaiting_review(make_order("7203", fee_cents=4800))
    small = awaiting_review(make_order("7204"))
    # The managers' stream names both (in one event or two); the agents' only theirs.
    heard: list[list[int]] = []
    while len(heard) < 2:
        heard += managers.next()[1]["cards"]
    assert heard == [card(big), card(small)]
    assert agents.next()[1]["cards"] == [card(small)]

    Ticket.objects.filter(pk=small.pk).update(escalated_for=small.pending_interrupt_id)
    assert agents.next()[1]["cards"] == [card(small)]  # it left their queue
    Ticket.objects.filter(pk=small.pk).update(claimed_by=manager)  # the managers' now
    later = awaiting_review(make_order("7205"))
    assert agents.next()[1]["cards"] == [card(later)]
    agents.close(), managers.close()


def test_no_customers_data_goes_down_the_stream(events, manager):
    stream = listen(events, manager)
    stream.next()
    ticket = awaiting_review(make_order("ORD-7206", name="Ana Souza"), note="Call me on 555-0100")
    name, data, raw = stream.next()
    assert name == "cards" and set(data) == {"clock", "cards"}
    assert data["cards"] == [card(ticket)]
    for secret in ("Ana", "Souza", "ana@example.com", "ORD-7206", "555-0100"):
        assert secret not in raw
    stream.close()


def test_a_page_of_the_web_origin_may_read_the_stream_and_no_other(
    transactional_db, tmp_path, agent
):
    """The demo has no proxy: the page (the web's origin) opens the events process's own port."""
    server = events_process(tmp_path, REFUNDS_EVENTS_ORIGINS="http://127.0.0.1:8000")
    try:
        web = listen(server, agent, Origin="http://127.0.0.1:8000")
        assert web.response.headers["access-control-allow-origin"] == "http://127.0.0.1:8000"
        assert web.response.headers["access-control-allow-credentials"] == "true"
        other = listen(server, agent, Origin="http://evil.example")
        assert "access-control-allow-origin" not in other.response.headers
        web.close(), other.close()
    finally:
        server.stop()


@pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
    reason="counts the events process's sessions at PostgreSQL",
)
def test_more_streams_hold_no_more_database_connections(events, agent):
    """The cost of a stream is not a database connection: a request's connection (its login,
    read in a thread of its own) stayed open as long as its stream, 99 of them for 100 streams."""
    first = listen(events, agent)
    first.next()

    def sessions() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            )
            return cursor.fetchone()[0]

    before = sessions()
    more = [listen(events, agent) for _ in range(5)]
    for stream in more:
        stream.next()  # its login was read, its clock sent
    assert sessions() == before
    for stream in (first, *more):
        stream.close()


def test_a_quiet_stream_hears_a_comment_now_and_then(transactional_db, tmp_path, agent):
    server = events_process(tmp_path, REFUNDS_EVENTS_HEARTBEAT_SECONDS="0.5")
    try:
        stream = listen(server, agent)
        stream.next()
        wait_for(lambda: stream.comments >= 2, timeout=10, what="two heartbeats")
        stream.close()
    finally:
        server.stop()


@pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
    reason="PostgreSQL ends the watcher's session",
)
def test_the_doorbell_rings_again_after_the_database_dropped_its_connection(events, agent):
    stream = listen(events, agent)
    stream.next()
    with connection.cursor() as cursor:  # a failover, a restart: every other session ends
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchone()[0] >= 1
    ticket = awaiting_review(make_order("7207"))
    name, data, _ = stream.next(timeout=10)
    assert (name, data["cards"]) == ("cards", [card(ticket)])
    stream.close()
