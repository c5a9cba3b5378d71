"""A request in flight when the database drops its connection answers 503 with Retry-After,
never 500, and changes nothing: its transaction went with the connection.

The blip is real: the request is held inside its transaction (a post_save receiver this test
connects, in the live server's thread) while the test terminates that request's own PostgreSQL
backend with pg_terminate_backend, then let go; its next statement meets the dead connection."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.conf import settings
from django.db import connection
from django.db.models.signals import post_save

from api.models import ApiToken
from refunds.models import AuditEvent, Ticket
from tests.conftest import purge_broker, wait_for
from tests.test_blip import browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not settings.IS_POSTGRES,
        reason="a dropped connection is a PostgreSQL event: SQLite has no server to lose",
    ),
]


class HeldInside:
    """Holds the request that saves a new `model` row, inside its transaction, until released;
    records the PostgreSQL backend that request runs on."""

    def __init__(self, model: type) -> None:
        self.model = model
        self.inside = threading.Event()
        self.release = threading.Event()
        self.backend_pid = 0
        post_save.connect(self.receive, sender=model, dispatch_uid=id(self))

    def receive(self, sender: type, instance: object, created: bool, **_kwargs) -> None:
        if not created or threading.current_thread() is threading.main_thread():
            return
        self.backend_pid = connection.connection.info.backend_pid
        self.inside.set()
        self.release.wait(timeout=30)

    def disconnect(self) -> None:
        post_save.disconnect(sender=self.model, dispatch_uid=id(self))
        self.release.set()


@pytest.fixture
def hold_inside(broker) -> Iterator:
    held: list[HeldInside] = []

    def install(model: type) -> HeldInside:
        held.append(HeldInside(model))
        return held[-1]

    yield install
    for one in held:
        one.disconnect()
    purge_broker()  # the wake-ups of the tickets opened after the blip


def terminate_backend(pid: int) -> None:
    """What a database restart or failover does to one session, from another connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    def gone() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            return cursor.fetchone()[0] == 0

    wait_for(gone, timeout=10, what=f"backend {pid} to end")


def blip_under(held: HeldInside, send) -> requests.Response:
    """Send a request, terminate its backend while it is held inside its transaction, and
    return its answer."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        answer = pool.submit(send)
        assert held.inside.wait(timeout=30), "the request never reached its transaction"
        terminate_backend(held.backend_pid)
        held.release.set()
        return answer.result(timeout=30)


def test_an_api_post_whose_connection_drops_answers_503_and_a_retry_opens_the_ticket_once(
    live_server, hold_inside, agent, late_order
):
    token = ApiToken.issue(agent)[1]
    held = hold_inside(Ticket)

    def open_ticket() -> requests.Response:
        return requests.post(
            f"{live_server.url}/api/tickets/",
            json={"order_number": "1042", "note": "late"},
            headers={"Authorization": f"Token {token}", "Idempotency-Key": "blip-1"},
            timeout=30,
        )

    response = blip_under(held, open_ticket)

    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == str(settings.DATABASE_RETRY_AFTER_SECONDS)
    assert response.json() == {
        "status": 503,
        "code": "database_unavailable",
        "error": "The database is unavailable for a moment; nothing was changed. "
        "Try again shortly.",
    }
    assert not Ticket.objects.exists()  # rolled back with the connection
    assert not AuditEvent.objects.exists()

    held.disconnect()
    again = open_ticket()  # the same key: nothing was kept for it, so it opens now
    assert again.status_code == 201, again.text
    assert Ticket.objects.count() == 1


def test_a_page_post_whose_connection_drops_answers_the_503_page_and_changes_nothing(
    live_server, hold_inside, agent, late_order
):
    desk = browser(live_server, agent)
    held = hold_inside(Ticket)

    def open_ticket() -> requests.Response:
        return desk.post(
            f"{live_server.url}/tickets/new/",
            data={"order_number": "1042", "note": "late"},
            headers={"X-CSRFToken": desk.cookies.get("csrftoken", ""), "Referer": live_server.url},
            allow_redirects=False,
            timeout=30,
        )

    response = blip_under(held, open_ticket)

    assert response.status_code == 503, response.text[:2000]
    assert response.headers["Retry-After"] == str(settings.DATABASE_RETRY_AFTER_SECONDS)
    assert response.headers["Content-Type"].startswith("text/html")
    assert "Try again in a moment" in response.text
    assert "Nothing was changed" in response.text
    assert not Ticket.objects.exists()
    assert not AuditEvent.objects.exists()

    held.disconnect()
    assert desk.get(f"{live_server.url}/tickets/new/").status_code == 200  # a fresh connection
    assert open_ticket().status_code == 302
    assert Ticket.objects.count() == 1
