"""One refund per order, for the business and not only for the row: one open ticket per order,
kept by the database; a helpdesk's retried POST answered once; an order refunded in full declined;
counted at the processor and the mail server with a real worker."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from api.models import ApiToken, IdempotentRequest
from refunds import enqueue, services
from refunds.models import AuditEvent, Ticket
from tests.conftest import wait_for

URL = "/api/tickets/"


def status_of(ticket_id: int) -> str:
    return Ticket.objects.get(pk=ticket_id).status


@pytest.fixture
def token(agent) -> str:
    return ApiToken.issue(agent)[1]


def post(token: str, body: dict, **headers):
    client = Client(headers={"Authorization": f"Token {token}", **headers})
    return client.post(URL, data=json.dumps(body), content_type="application/json")


def test_a_second_ticket_for_an_open_order_leads_to_the_open_one(client, agent, late_order):
    first = services.ticket_open(order_number="1042", opened_by=agent)
    client.force_login(agent)
    for _ in range(4):
        response = client.post(reverse("reviews:ticket_new"), {"order_number": "1042"})
        assert response.status_code == 302
        assert response["Location"] == reverse("reviews:ticket", args=[first.pk])
    assert Ticket.objects.count() == 1
    page = client.get(response["Location"]).content.decode()
    assert f"Order 1042 already has an open ticket ({first.pk}" in page


def test_a_second_tickets_note_is_kept_on_the_open_ones_timeline_and_said(
    client, agent, colleague, late_order
):
    first = services.ticket_open(order_number="1042", note="late", opened_by=agent)
    client.force_login(colleague)
    typed = "Customer called again: the parcel was opened."
    response = client.post(reverse("reviews:ticket_new"), {"order_number": "1042", "note": typed})
    assert response.status_code == 302 and Ticket.objects.count() == 1
    note = AuditEvent.objects.get(ticket=first, action=AuditEvent.Action.NOTE)
    assert (note.actor, note.note) == (colleague, typed)
    page = client.get(response["Location"]).content.decode()
    assert "Your note is added to its timeline." in page
    assert "flash-info" in page  # not the green notice of a ticket opened
    assert f"bea added a note (while opening a second ticket for this order): “{typed}”" in page


def test_a_second_ticket_without_a_note_adds_nothing_to_the_timeline(client, agent, late_order):
    first = services.ticket_open(order_number="1042", opened_by=agent)
    client.force_login(agent)
    response = client.post(reverse("reviews:ticket_new"), {"order_number": "1042"})
    assert "Your note" not in client.get(response["Location"]).content.decode()
    assert not AuditEvent.objects.filter(ticket=first, action=AuditEvent.Action.NOTE).exists()


def test_the_api_keeps_a_second_tickets_note_and_says_so(token, agent, late_order):
    first = post(token, {"order_number": "1042"})
    again = post(token, {"order_number": "1042", "note": "The box was empty."})
    assert again.status_code == 409
    assert "Your note is added to its timeline." in again.json()["error"]
    note = AuditEvent.objects.get(ticket_id=first.json()["id"], action=AuditEvent.Action.NOTE)
    assert note.note == "The box was empty."


def test_the_database_allows_one_open_ticket_per_order(db, late_order):
    from django.db import IntegrityError, transaction

    Ticket.objects.create(thread_id="a", order=late_order, status="awaiting_review")
    with pytest.raises(IntegrityError), transaction.atomic():
        Ticket.objects.create(thread_id="b", order=late_order, status="new")
    Ticket.objects.create(thread_id="c", order=late_order, status="refunded")  # closed: fine


def test_the_api_answers_a_second_ticket_with_the_open_one(token, agent, late_order):
    first = post(token, {"order_number": "1042"})
    again = post(token, {"order_number": "1042"})
    assert first.status_code == 201 and again.status_code == 409
    assert again.json()["ticket"]["id"] == first.json()["id"]
    assert again.json()["ticket"]["status"] == "new"
    assert "already has an open ticket" in again.json()["error"]
    assert Ticket.objects.count() == 1


def test_the_same_idempotency_key_twice_opens_one_ticket_and_answers_the_same(token, late_order):
    first = post(token, {"order_number": "1042", "note": "late"}, **{"Idempotency-Key": "hd-77"})
    again = post(token, {"order_number": "1042", "note": "late"}, **{"Idempotency-Key": "hd-77"})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert again["Idempotency-Key"] == "hd-77"
    assert Ticket.objects.count() == 1


def test_the_same_idempotency_key_with_another_body_is_refused_with_422(token, late_order):
    post(token, {"order_number": "1042"}, **{"Idempotency-Key": "hd-78"})
    other = post(token, {"order_number": "1043"}, **{"Idempotency-Key": "hd-78"})
    assert other.status_code == 422
    assert "different request body" in other.json()["error"]
    assert Ticket.objects.count() == 1


def test_an_idempotency_key_is_kept_for_24_hours(token, late_order):
    from datetime import timedelta

    from django.utils import timezone

    post(token, {"order_number": "1042"}, **{"Idempotency-Key": "hd-79"})
    IdempotentRequest.objects.update(created_at=timezone.now() - timedelta(hours=25))
    later = post(token, {"order_number": "1042"}, **{"Idempotency-Key": "hd-79"})
    assert later.status_code == 409  # the key expired; the order's open ticket still stands
    assert IdempotentRequest.objects.count() == 1


def test_two_people_opening_the_same_order_at_once_get_one_ticket(
    transactional_db, agent, manager, late_order, monkeypatch
):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)
    start = threading.Barrier(2)
    answers: list[int] = []

    def open_it(user) -> None:
        client = Client()
        client.force_login(user)
        start.wait(timeout=10)
        answers.append(client.post(reverse("reviews:ticket_new"), {"order_number": "1042"}))
        connection.close()

    threads = [threading.Thread(target=open_it, args=(u,)) for u in (agent, manager)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    ticket = Ticket.objects.get()
    assert [r.status_code for r in answers] == [302, 302]
    assert {r["Location"] for r in answers} == {reverse("reviews:ticket", args=[ticket.pk])}


def test_two_helpdesk_retries_at_once_with_one_key_open_one_ticket(
    transactional_db, token, late_order, monkeypatch
):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)
    start = threading.Barrier(2)
    answers = []

    def send() -> None:
        start.wait(timeout=10)
        answers.append(post(token, {"order_number": "1042"}, **{"Idempotency-Key": "same"}))
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(r.status_code for r in answers) == [201, 201]
    assert answers[0].json() == answers[1].json()
    assert Ticket.objects.count() == 1


@pytest.mark.slow
def test_five_tickets_for_one_order_refund_it_once(workers, sinks, agent, admin_user, late_order):
    """The reported break: five tickets for order 1042, each approved, paid $34.95 for a $6.99
    fee. Now: one refund of $6.99 at the processor, one confirmation at the mail server; a ticket
    opened after the refund is declined by policy, naming the earlier one."""
    workers("w1")
    opened, refused = [], 0
    for _ in range(5):
        try:
            opened.append(services.ticket_open(order_number="1042", opened_by=agent))
        except services.TicketAlreadyOpen:
            refused += 1
    assert (len(opened), refused) == (1, 4)
    ticket = opened[0]
    wait_for(lambda: status_of(ticket.pk) == "awaiting_review", what="the review")
    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=admin_user,
        orders=services.review_answers(ticket, answer="approve"),
    )
    wait_for(lambda: status_of(ticket.pk) == "refunded", what="the refund")

    later = services.ticket_open(order_number="1042", opened_by=agent)
    wait_for(lambda: status_of(later.pk) == "declined", what="the decline")
    later.refresh_from_db()
    assert f"already refunded in full ($6.99, ticket {ticket.pk})" in later.outcome_reason

    refunds = sinks.gateway.refunds_for("refund-1042")
    assert [r["amount_cents"] for r in refunds] == [699]
    wait_for(lambda: sinks.smtp.count() == 2, what="both emails")
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1, f"{later.thread_id}:notify": 1}
