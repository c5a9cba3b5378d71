"""The JSON API: open a ticket, read it back; every bad request answers JSON and creates nothing.

ticket_open enqueues its task on commit; inside a test transaction nothing commits, so no broker
is needed."""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import Client
from django.utils import timezone

from api.models import ApiToken
from refunds import runner
from refunds.models import Charge, Decision, Email, Ticket
from refunds.services import NOTE_MAX
from tests.conftest import make_order

URL = "/api/tickets/"


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    # The personas are created with a password; the default hasher costs ~0.5 s per user.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def token(agent) -> str:
    return ApiToken.issue(agent)[1]


@pytest.fixture
def api(token) -> Client:
    return Client(headers={"Authorization": f"Token {token}"})


def post_json(client: Client, body, **kwargs):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **kwargs)


# --- opening a ticket ----------------------------------------------------------------------------
def test_it_opens_a_ticket_with_a_token(api, agent, late_order):
    response = post_json(api, {"order_number": "1042", "note": "4 days late"})

    assert response.status_code == 201
    body = response.json()
    ticket = Ticket.objects.get()
    assert body["id"] == ticket.pk
    assert body["thread_id"] == ticket.thread_id and ticket.thread_id.startswith("refund-1042-")
    assert body["status"] == "new"
    assert body["url"].endswith(f"/api/tickets/{ticket.pk}/")
    assert ticket.note == "4 days late"
    assert ticket.opened_by == agent


def test_it_accepts_a_numeric_order_number(api, late_order):
    response = post_json(api, {"order_number": 1042})
    assert response.status_code == 201
    assert Ticket.objects.get().order == late_order


def test_it_enqueues_the_ticket_on_commit(
    api, late_order, monkeypatch, django_capture_on_commit_callbacks
):
    woken = []
    monkeypatch.setattr("refunds.enqueue.wake", woken.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = post_json(api, {"order_number": "1042"})
    assert woken == [response.json()["id"]]


def test_it_opens_a_ticket_even_when_the_broker_is_unreachable(
    api, late_order, caplog, monkeypatch, django_capture_on_commit_callbacks
):
    from kombu.exceptions import OperationalError

    from config.celery_app import app

    def unreachable(*args, **kwargs):
        raise OperationalError("Error 111 connecting to the broker. Connection refused.")

    # Patched on the app, not on Celery's connection pools, which would outlive this test.
    monkeypatch.setattr(app, "send_task", unreachable)
    with django_capture_on_commit_callbacks(execute=True):
        response = post_json(api, {"order_number": "1042"})

    assert response.status_code == 201
    assert Ticket.objects.count() == 1
    assert "recovery sweep will pick it up" in caplog.text


# --- bad input -----------------------------------------------------------------------------------
def test_an_order_the_desk_does_not_have_is_a_422(api, late_order):
    response = post_json(api, {"order_number": "9999"})
    assert response.status_code == 422, response.content
    assert "There is no order 9999" in response.json()["error"]
    assert Ticket.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "not valid JSON"),
        ("", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"1042"', "must be a JSON object"),
        ("null", "must be a JSON object"),
        ({"note": "late"}, "Missing field: order_number"),
        ({"order_number": "1042", "amount": 5}, "Unknown field(s): amount"),
        ({"order_number": ["1042"]}, "order_number must be a string"),
        ({"order_number": True}, "order_number must be a string"),
        ({"order_number": None}, "order_number must be a string"),
        ({"order_number": 10.42}, "order_number must be a string"),
        ({"order_number": "1042", "note": 5}, "note must be a string"),
        ({"order_number": "   "}, "Enter an order number"),
        ({"order_number": "1042", "note": "x" * (NOTE_MAX + 1)}, "note is too long (at most"),
    ],
)
def test_it_rejects_bad_input_with_a_json_error_and_creates_nothing(api, late_order, body, message):
    response = post_json(api, body)

    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    assert message in response.json()["error"]
    assert Ticket.objects.count() == 0


def test_a_note_of_exactly_the_limit_is_accepted(api, late_order):
    assert post_json(api, {"order_number": "1042", "note": "x" * NOTE_MAX}).status_code == 201


# --- authentication ------------------------------------------------------------------------------
def test_it_refuses_a_request_without_a_token(client, late_order):
    response = post_json(client, {"order_number": "1042"})
    assert response.status_code == 401
    assert "Authorization: Bearer <key>" in response.json()["error"]
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert Ticket.objects.count() == 0


def test_it_refuses_a_bad_token(late_order, token):
    client = Client(headers={"Authorization": "Token not-a-real-key"})
    response = post_json(client, {"order_number": "1042"})
    assert response.status_code == 401
    assert response.json() == {
        "status": 401,
        "code": "not_authenticated",
        "error": "Invalid API token.",
    }
    assert Ticket.objects.count() == 0


@pytest.mark.parametrize("scheme", ["Bearer", "Token", "bearer"])
def test_it_accepts_the_key_as_bearer_or_token(late_order, token, scheme):
    client = Client(headers={"Authorization": f"{scheme} {token}"})
    assert post_json(client, {"order_number": "1042"}).status_code == 201


def test_it_refuses_a_good_key_under_another_scheme(late_order, token):
    client = Client(headers={"Authorization": f"Basic {token}"})
    response = post_json(client, {"order_number": "1042"})
    assert response.status_code == 401
    assert "Unknown authorization scheme" in response.json()["error"]


def test_it_refuses_the_token_of_an_inactive_user(agent, late_order, token):
    agent.is_active = False
    agent.save()
    client = Client(headers={"Authorization": f"Token {token}"})
    assert post_json(client, {"order_number": "1042"}).status_code == 401


def test_it_refuses_a_bad_token_even_with_a_logged_in_session(agent, late_order):
    client = Client(headers={"Authorization": "Token nope"})
    client.force_login(agent)
    assert client.get(f"{URL}1/").status_code == 401


def test_it_refuses_a_session_post_without_a_csrf_token(agent, late_order):
    client = Client(enforce_csrf_checks=True)
    client.force_login(agent)
    response = post_json(client, {"order_number": "1042"})
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]
    assert Ticket.objects.count() == 0


def test_it_accepts_a_session_post_with_its_csrf_token(agent, late_order):
    client = Client(enforce_csrf_checks=True)
    client.force_login(agent)
    client.get("/login/")  # sets the CSRF cookie
    csrf = client.cookies["csrftoken"].value
    response = post_json(client, {"order_number": "1042"}, headers={"X-CSRFToken": csrf})
    assert response.status_code == 201


def test_a_session_may_read_without_a_csrf_token(agent, late_order):
    ticket = Ticket.objects.create(thread_id="refund-1042-t", order=late_order)
    client = Client(enforce_csrf_checks=True)
    client.force_login(agent)
    assert client.get(f"{URL}{ticket.pk}/").status_code == 200


def test_a_token_post_needs_no_csrf_token(token, late_order):
    client = Client(enforce_csrf_checks=True, headers={"Authorization": f"Token {token}"})
    assert post_json(client, {"order_number": "1042"}).status_code == 201


def test_it_refuses_a_read_without_a_token(client, late_order):
    ticket = Ticket.objects.create(thread_id="refund-1042-t", order=late_order)
    assert client.get(f"{URL}{ticket.pk}/").status_code == 401


# --- methods and missing tickets -----------------------------------------------------------------
def test_it_answers_404_for_an_unknown_ticket(api):
    response = api.get(f"{URL}424242/")
    assert response.status_code == 404
    assert response.json() == {
        "status": 404,
        "code": "not_found",
        "error": "There is no ticket 424242.",
    }


def test_it_rejects_put_on_the_collection(api):
    response = api.put(URL, data="{}", content_type="application/json")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_it_rejects_post_on_a_ticket(api, late_order):
    ticket = Ticket.objects.create(thread_id="refund-1042-t", order=late_order)
    assert post_json_to(api, f"{URL}{ticket.pk}/").status_code == 405


def test_it_rejects_delete_on_a_ticket(api, late_order):
    ticket = Ticket.objects.create(thread_id="refund-1042-t", order=late_order)
    assert api.delete(f"{URL}{ticket.pk}/").status_code == 405
    assert Ticket.objects.filter(pk=ticket.pk).exists()


def post_json_to(client: Client, url: str):
    return client.post(url, data="{}", content_type="application/json")


# --- reading a ticket ----------------------------------------------------------------------------
def test_it_reads_back_a_new_ticket(api, late_order):
    ticket_id = post_json(api, {"order_number": "1042", "note": "late"}).json()["id"]

    body = api.get(f"{URL}{ticket_id}/").json()

    assert body["id"] == ticket_id
    assert body["status"] == "new"
    assert body["order_number"] == "1042"
    assert body["note"] == "late"
    assert body["required_role"] is None
    assert body["pending_review"] is None
    assert body["decision"] is None
    assert body["charges"] == [] and body["emails"] == []


def test_it_shows_the_pending_review_of_an_awaiting_ticket(api, late_order):
    payload = {"action_request": {"action": "refund", "args": {"order": "1042"}}, "config": {}}
    ticket = Ticket.objects.create(
        thread_id="refund-1042-t",
        order=late_order,
        status=Ticket.Status.AWAITING_REVIEW,
        required_role="agent",
        pending_interrupt_id="a" * 32,
        pending_payload=payload,
        amount_cents=699,
    )

    body = api.get(f"{URL}{ticket.pk}/").json()

    assert body["status"] == "awaiting_review"
    assert body["required_role"] == "agent"
    assert body["amount_cents"] == 699
    # One order: no per-order lines (a ticket of several lists them: tests/test_api_several.py).
    assert body["pending_review"] == {"interrupt_id": "a" * 32, "payload": payload, "orders": None}
    assert body["order_numbers"] == ["1042"]


def test_it_shows_the_decision_charges_and_emails_of_a_refunded_ticket(
    api, agent, manager, late_order
):
    ticket = Ticket.objects.create(
        thread_id="refund-1042-t",
        order=late_order,
        opened_by=agent,
        status=Ticket.Status.REFUNDED,
        required_role="manager",
        pending_interrupt_id="",
        outcome_reason="Refunded $6.99.",
    )
    Decision.objects.create(
        ticket=ticket,
        interrupt_id="b" * 32,
        reviewer=manager,
        answer="approve",
        applied_at=timezone.now(),
    )
    Charge.objects.create(
        ticket=ticket,
        order=late_order,
        idempotency_key="k",
        amount_cents=699,
        receipt="rcpt_1",
        status="succeeded",
    )
    Email.objects.create(
        ticket=ticket,
        key="e",
        to="ana@example.com",
        subject="Your refund",
        body="...",
        sent_at=timezone.now(),
    )

    body = api.get(f"{URL}{ticket.pk}/").json()

    assert body["status"] == "refunded"
    assert body["pending_review"] is None
    assert body["outcome_reason"] == "Refunded $6.99."
    assert body["decision"] | {"decided_at": None} == {
        "interrupt_id": "b" * 32,
        "answer": "approve",
        "reason": "",
        "orders": None,
        "reviewer": "manager",
        "answered_by": "reviewer",
        "decided_at": None,
        "applied": True,
    }
    assert [(c["receipt"], c["amount_cents"]) for c in body["charges"]] == [("rcpt_1", 699)]
    assert [(e["to"], e["subject"]) for e in body["emails"]] == [("ana@example.com", "Your refund")]
    assert body["emails"][0]["sent_at"] is not None


def test_it_reads_a_ticket_the_runner_advanced_to_its_review(api, db):
    # A customer of its own: the checkpoint store outlives the test database.
    make_order("2042", late=3, fee_cents=850, name=f"Api{uuid.uuid4().hex[:8]} Tester")
    ticket_id = post_json(api, {"order_number": "2042"}).json()["id"]

    assert runner.advance(ticket_id) == "awaiting_review"

    body = api.get(f"{URL}{ticket_id}/").json()
    assert body["status"] == "awaiting_review"
    assert body["required_role"] == "agent"
    assert body["pending_review"]["payload"]["action_request"]["args"] == {
        "orders": ["2042"],
        "amount_cents": 850,
    }
    assert body["pending_review"]["interrupt_id"] == Ticket.objects.get().pending_interrupt_id
    assert body["nodes_run"][-1] == "triage"


def test_no_answer_holding_customer_data_may_be_kept_by_a_cache(api, late_order):
    opened = post_json(api, {"order_number": "1042"})
    ticket_id = opened.json()["id"]
    answers = [
        opened,
        api.get(URL),
        api.get(f"{URL}{ticket_id}/"),
        api.get(f"{URL}999999/"),  # an error too: it says what exists
        Client().get(URL),  # 401
    ]
    for answer in answers:
        assert answer["Cache-Control"] == "no-store", (answer.status_code, answer.headers)
