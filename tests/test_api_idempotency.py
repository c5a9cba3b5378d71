"""Idempotency-Key on the API's POSTs (api/idempotency.py): a key answers again only for the
caller and endpoint that used it, for 24 hours; past that it is new, or, for a message (which is
one message per key for good), refused in words; of two requests with one key at once, one runs."""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test import Client
from django.urls import resolve
from django.utils import timezone

from api.models import ApiToken, IdempotentRequest
from intake.models import Message
from refunds import enqueue
from refunds.models import Order, Ticket
from tests.conftest import in_another_session, wait_for

MESSAGE = {"sender": "ana@example.com", "subject": "Late", "body": "Order #1042 came late."}
ORDER = {
    "order_number": "7501",
    "customer_name": "Ana Souza",
    "customer_email": "ana@example.com",
    "currency": "USD",
    "shipping_fee": "8.99",
    "promised_on": "2026-11-02",
    "delivered_on": "2026-11-06",
}


@pytest.fixture
def no_broker(monkeypatch) -> None:
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)


@pytest.fixture
def api(agent, no_broker) -> Client:
    # An agent who is also the shop's integration: one caller that may use every POST.
    agent.groups.add(Group.objects.get_or_create(name="Shop integrations")[0])
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(agent)[1]}"})


def post(client: Client, url: str, body: dict | str, key: str):
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(
        url, data=data, content_type="application/json", headers={"Idempotency-Key": key}
    )


def test_a_message_key_reused_after_24_hours_is_refused_not_answered_with_the_old_message(api):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=False) as clock:
        first = post(api, "/api/messages/", MESSAGE, "hd-1")
        assert first.status_code == 202
        clock.shift(timedelta(hours=25))
        later = post(api, "/api/messages/", {**MESSAGE, "body": "A new question."}, "hd-1")
    assert later.status_code == 422, later.content
    assert later.json()["code"] == "unprocessable"
    assert (
        f"Message {first.json()['id']} was handed in with this Idempotency-Key"
        in (later.json()["error"])
    )
    assert "a new message needs a new key" in later.json()["error"]
    assert Message.objects.count() == 1


def test_a_message_key_reused_within_24_hours_answers_the_first_response(api):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=False) as clock:
        first = post(api, "/api/messages/", MESSAGE, "hd-1")
        clock.shift(timedelta(hours=23))
        again = post(api, "/api/messages/", MESSAGE, "hd-1")
    assert (again.status_code, again.json()) == (202, first.json())
    assert Message.objects.count() == 1


def test_a_key_reused_after_24_hours_is_a_new_request(api):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=False) as clock:
        assert post(api, "/api/orders/", {"orders": [ORDER]}, "push-1").json()["created"] == 1
        clock.shift(timedelta(hours=25))
        changed = {**ORDER, "shipping_fee": "9.99"}
        later = post(api, "/api/orders/", {"orders": [changed]}, "push-1")
    assert later.status_code == 200, later.content
    assert later.json()["updated"] == 1
    assert Order.objects.get(number="7501").shipping_fee_cents == 999


def test_a_key_used_on_one_endpoint_is_not_answered_on_another(api, late_order):
    body = json.dumps({"order_number": "1042"})
    assert post(api, "/api/tickets/", body, "k-1").status_code == 201
    other = post(api, "/api/orders/", body, "k-1")
    assert other.status_code == 400, other.content
    assert "Unknown field(s): order_number" in other.json()["error"]


def test_a_key_used_on_one_endpoint_is_free_on_another(api, late_order):
    assert post(api, "/api/messages/", MESSAGE, "k-2").status_code == 202
    opened = post(api, "/api/tickets/", {"order_number": "1042"}, "k-2")
    assert opened.status_code == 201, opened.content
    assert Ticket.objects.count() == 1 and Message.objects.count() == 1


def test_a_key_is_the_callers_own(api, manager, no_broker):
    assert post(api, "/api/messages/", MESSAGE, "k-3").status_code == 202
    theirs = Client(headers={"Authorization": f"Bearer {ApiToken.issue(manager)[1]}"})
    assert post(theirs, "/api/messages/", MESSAGE, "k-3").status_code == 202
    assert Message.objects.count() == 2


def test_a_request_whose_key_another_session_claims_at_the_same_time_runs_nothing(
    transactional_db, api, agent
):
    """The late guard: the key's UNIQUE constraint, met by the request's claim while another
    request's claim of the same key is not yet committed. It waits, then answers that one's
    response, and hands in no message of its own."""
    body = json.dumps(MESSAGE)
    kept = {"id": 4242, "status": "received", "received_at": "2026-12-01T09:00:00Z"}
    claimed, release = threading.Event(), threading.Event()

    def claim_first() -> None:
        with transaction.atomic():
            IdempotentRequest.objects.create(
                user=agent,
                endpoint=f"POST {resolve('/api/messages/').view_name}",
                key="same",
                request_hash=hashlib.sha256(body.encode()).hexdigest(),
                status_code=202,
                response=json.dumps(kept),
            )
            claimed.set()
            assert release.wait(30)

    holder = in_another_session(claim_first)
    assert claimed.wait(10)
    answers = []
    request = in_another_session(lambda: answers.append(post(api, "/api/messages/", body, "same")))
    if connection.vendor == "postgresql":
        # Let the request reach the constraint: it waits on the holder's uncommitted row.
        wait_for(lambda: _waiting_on_a_lock() > 0, timeout=10)
    release.set()
    holder.join(10)
    request.join(30)
    assert [(a.status_code, a.json()) for a in answers] == [(202, kept)]
    assert Message.objects.count() == 0
    assert IdempotentRequest.objects.count() == 1


def _waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        return cursor.fetchone()[0]


def test_expired_keys_are_deleted(api):
    with time_machine.travel(timezone.now(), tick=False) as clock:
        post(api, "/api/messages/", MESSAGE, "old")
        clock.shift(timedelta(hours=24, seconds=1))
        post(api, "/api/messages/", {**MESSAGE, "body": "Another."}, "new")
    assert list(IdempotentRequest.objects.values_list("key", flat=True)) == ["new"]
