"""A blip test (tests/test_blip.py) terminates every PostgreSQL session of the test database but
the test's own, as a restart would: none of the test process's own connections that a later test
uses may be among them.

One was: the connection a browser test opens under sync Playwright's event loop. Django keeps
the connections of a thread with a running loop apart from its plain ones, so that connection
was not the one the blip spared; it outlived the test in the main thread's context, and in
random order the browser tests after a blip failed at their first query. These tests open
Playwright's driver only (no browser), so they run wherever Playwright is installed."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import wait_for
from tests.test_blip import drop_every_connection
from tests.test_browser import playwright_session

pytestmark = pytest.mark.skipif(
    not settings.IS_POSTGRES, reason="a database blip is a PostgreSQL event"
)


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def sessions() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        return {pid for (pid,) in cursor.fetchall()}


def test_a_browser_session_leaves_no_connection_of_its_own_open(db, monkeypatch):
    plain = backend_pid()
    with playwright_session(monkeypatch):
        under_the_loop = backend_pid()
    assert under_the_loop != plain  # Django's second connection of this thread
    wait_for(lambda: under_the_loop not in sessions(), timeout=10, what="its session to end")


def test_a_browser_session_after_a_blip_gets_a_working_connection(db, monkeypatch):
    with playwright_session(monkeypatch):
        before = backend_pid()
    drop_every_connection()
    with playwright_session(monkeypatch):
        assert backend_pid() != before  # a dead connection raised OperationalError here
