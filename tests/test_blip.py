"""A database blip: PostgreSQL drops every connection of the app (a restart, a failover, here
pg_terminate_backend) while a worker is inside the SMTP conversation and while reviewers post
decisions. One message is delivered, the next request answers normally, and the ticket moves
again within seconds, not after a lease or two."""

from __future__ import annotations

import time

import pytest
import requests
from django.conf import settings
from django.db import connection

from refunds import services
from refunds.models import Email, Ticket
from tests.conftest import wait_for
from tests.quiescence import quiesce

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not settings.IS_POSTGRES, reason="a database blip is a PostgreSQL event"),
]


def drop_every_connection() -> int:
    """What a database restart does to the app: every session but this one is terminated."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def status(ticket: Ticket) -> str:
    return Ticket.objects.values_list("status", flat=True).get(pk=ticket.pk)


def browser(live_server, user) -> requests.Session:
    from django.test import Client

    client = Client()
    client.force_login(user)
    session = requests.Session()
    session.cookies.update({k: v.value for k, v in client.cookies.items()})
    session.get(f"{live_server.url}/")  # a CSRF cookie, as a browser gets one
    return session


def post_decision(session: requests.Session, live_server, ticket: Ticket) -> requests.Response:
    return session.post(
        f"{live_server.url}/reviews/{ticket.pk}/decide/",
        data={"interrupt_id": ticket.pending_interrupt_id, "approve": "1"},
        headers={"X-CSRFToken": session.cookies.get("csrftoken", ""), "Referer": live_server.url},
        allow_redirects=False,
    )


@pytest.mark.parametrize(
    "slow_at",
    [
        "end",  # the blip lands while the server answers the final ".": the mark must not commit
        "recipient",  # it lands before the message ends: the mark is taken on a fresh connection
    ],
)
def test_a_blip_while_the_mail_is_sent_delivers_once_and_the_ticket_moves_on(
    workers, sinks, live_server, agent, admin_user, late_order, slow_at
):
    workers("w1", env={"REFUNDS_LEASE_SECONDS": "30"})
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    wait_for(lambda: status(ticket) == "awaiting_review", what="the review")
    ticket.refresh_from_db()
    sinks.smtp.slow(2.0, at=slow_at)  # the worker will be inside the SMTP conversation for 2 s
    reviewer = browser(live_server, admin_user)
    assert post_decision(reviewer, live_server, ticket).status_code == 302

    wait_for(
        lambda: Email.objects.filter(ticket=ticket, status="sending").exists(),
        what="the worker to be sending the email",
    )
    dropped = drop_every_connection()
    blip = time.monotonic()
    assert dropped >= 1

    # The next request of a reviewer answers normally: connections are checked before reuse.
    page = reviewer.get(f"{live_server.url}/tickets/{ticket.pk}/")
    assert page.status_code == 200

    wait_for(lambda: status(ticket) == "refunded", timeout=30, what="the refund")
    moved_in = time.monotonic() - blip
    assert moved_in < 15, f"the ticket waited {moved_in:.1f} s after the blip"
    quiesce(workers)  # nothing queued, running or leased: no copy can still be on its way
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    assert len(sinks.gateway.refunds_for(ticket.thread_id)) == 1
    assert Email.objects.get(ticket=ticket).status == "sent"


def test_decisions_posted_after_a_blip_are_recorded_not_answered_with_500(
    workers, sinks, live_server, agent, admin_user, late_order, big_order
):
    workers("w1")
    tickets = [
        services.ticket_open(order_number=number, opened_by=agent) for number in ("1042", "1045")
    ]
    for ticket in tickets:
        wait_for(lambda t=ticket: status(t) == "awaiting_review", what="the reviews")
        ticket.refresh_from_db()
    reviewer = browser(live_server, admin_user)
    reviewer.get(f"{live_server.url}/")  # the server now holds a persistent connection

    drop_every_connection()
    answers = [post_decision(reviewer, live_server, ticket) for ticket in tickets]

    assert [a.status_code for a in answers] == [302, 302]  # not a 500 from a dead connection
    for ticket in tickets:
        wait_for(lambda t=ticket: status(t) == "refunded", timeout=30, what="both refunds")
    assert sinks.smtp.count() == 2 and sinks.smtp.delivered_twice() == []
