"""Inputs that used to answer 500 answer 400 with the reason and change nothing: a NUL in an
order number (API and form), an amount too large for a number, a NUL in a customer's address;
a customer whose address holds "/" keeps working pages; amounts are ASCII digits only."""

from __future__ import annotations

import json

import pytest
from django import forms as django_forms
from django.test import Client
from django.urls import reverse

from api.models import ApiToken
from intake.models import Message
from ops.forms import parse_dollars
from refunds import enqueue
from refunds.models import CannedReason, Decision, Ticket
from reviews.forms import cents
from tests.conftest import make_order
from tests.reviewing import awaiting_review

NUL_NUMBER = "10\x0042"


def test_a_nul_in_the_order_number_is_refused_by_the_api(agent, late_order):
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(agent)[1]}"})
    for body in ({"order_number": NUL_NUMBER}, {"order_number": "1042", "note": "a\x00b"}):
        answer = api.post("/api/tickets/", json.dumps(body), content_type="application/json")
        assert answer.status_code == 400, answer.content
        assert "nul" in json.dumps(answer.json()).lower()
    assert not Ticket.objects.exists()


def test_a_nul_in_the_order_number_is_refused_by_the_form(client, agent, late_order):
    client.force_login(agent)
    answer = client.post("/tickets/new/", {"order_number": NUL_NUMBER})
    assert answer.status_code == 400 and b"control characters" in answer.content
    assert not Ticket.objects.exists()


@pytest.mark.parametrize("amount", ["1e309", "1e30", "NaN", "Infinity", "-1"])
def test_an_amount_filter_that_is_no_sum_of_dollars_is_explained(client, manager, amount):
    client.force_login(manager)
    answer = client.get("/tickets/", {"min_amount": amount})
    assert answer.status_code == 200
    assert "is not an amount in US dollars" in answer.content.decode()


def test_a_nul_in_a_customer_address_answers_400(client, manager):
    client.force_login(manager)
    answer = client.get("/customers/a%00b@x.example/")
    assert answer.status_code == 400
    assert b"not a customer's email address" in answer.content


def test_a_customer_whose_address_holds_a_slash_keeps_their_pages(client, admin_user, db):
    order = make_order("7001")
    order.customer_email = "ops/billing@x.example"  # valid: "/" may sit in the local part
    order.save()
    ticket = awaiting_review(order)
    client.force_login(admin_user)
    history = client.get(reverse("ops:history", args=[ticket.pk]))
    assert history.status_code == 200
    link = reverse("ops:customer", args=["ops/billing@x.example"])
    assert link in history.content.decode()
    customer = client.get(link)
    assert customer.status_code == 200 and b"ops/billing@x.example" in customer.content


def test_an_amount_past_ten_digits_of_dollars_is_refused_before_it_reaches_a_column():
    with pytest.raises(ValueError, match="not an amount in US dollars"):
        cents("99999999999999999999")  # the decide form takes 20 characters


@pytest.mark.parametrize("typed", ["１２.５０", "１２", "١٢", "12.5０"])
def test_full_width_and_other_scripts_digits_are_no_amount(typed):
    with pytest.raises(ValueError, match="not an amount in US dollars"):
        cents(typed)
    with pytest.raises(django_forms.ValidationError, match="not an amount in US dollars"):
        parse_dollars(typed)


def test_a_full_width_amount_in_the_search_is_explained(client, manager):
    client.force_login(manager)
    answer = client.get("/tickets/", {"max_amount": "１２"})
    assert "is not an amount in US dollars" in answer.content.decode()


# --- a NUL anywhere a customer, a reviewer or an integrator types ---------------------------------
# PostgreSQL text cannot hold one (a DataError, a 500); SQLite would keep it. Each way in refuses
# it with the field's name or, for a customer's own words, cleans it.
NUL = "late\x00 parcel"


@pytest.fixture
def no_wake(monkeypatch) -> None:
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)


@pytest.mark.parametrize("field", ["sender", "sender_name", "subject", "body"])
def test_a_nul_in_a_message_through_the_api_answers_400(agent, no_wake, field):
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(agent)[1]}"})
    body = {"sender": "ana@example.com", "subject": "Late", "body": "late #1042"}
    body[field] = "ana\x00@example.com" if field == "sender" else NUL

    answer = api.post(
        "/api/messages/",
        json.dumps(body),
        content_type="application/json",
        headers={"Idempotency-Key": "hd-1"},
    )

    assert answer.status_code == 400, answer.content
    assert answer.json()["fields"][field] == ["Null characters are not allowed."]
    assert not Message.objects.exists()


@pytest.mark.parametrize("field", ["reason", "note"])
def test_a_nul_in_a_decision_through_the_api_answers_400(manager, late_order, field):
    ticket = awaiting_review(late_order)
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(manager)[1]}"})
    body = {"interrupt_id": ticket.pending_interrupt_id, "answer": "reject", "reason": "Late"}

    answer = api.post(
        f"/api/tickets/{ticket.pk}/decision/",
        json.dumps({**body, field: NUL}),
        content_type="application/json",
        headers={"Idempotency-Key": "d-1"},
    )

    assert answer.status_code == 400, answer.content
    assert answer.json()["fields"][field] == ["Null characters are not allowed."]
    assert not Decision.objects.exists()


def test_a_nul_in_a_reason_on_the_desk_is_a_form_error(client, manager, late_order):
    ticket = awaiting_review(late_order)
    client.force_login(manager)

    answer = client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {"interrupt_id": ticket.pending_interrupt_id, "reject": "1", "reason": NUL},
        follow=True,
    )

    assert answer.status_code == 200
    assert "Null characters are not allowed." in answer.content.decode()
    assert not Decision.objects.exists()


def test_a_nul_in_a_pasted_message_is_cleaned(client, agent, no_wake):
    client.force_login(agent)

    answer = client.post("/tickets/new/", {"sender": "ana@example.com", "message": NUL})

    assert answer.status_code == 302
    assert Message.objects.get().body == "late\ufffd parcel"


def test_a_nul_in_a_canned_reason_is_a_form_error(client, admin_user):
    client.force_login(admin_user)
    before = list(CannedReason.objects.values_list())

    answer = client.post(
        "/admin/refunds/cannedreason/add/", {"title": NUL, "text": NUL, "active": "on"}
    )

    assert answer.status_code == 200
    assert "Null characters are not allowed." in answer.content.decode()
    assert list(CannedReason.objects.values_list()) == before
