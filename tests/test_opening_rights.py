"""Only the desk opens tickets: a logged-in user in no desk group opens nothing, through the API
or the form (opening writes to the customer and tells which order numbers exist)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.test import Client

from api.models import ApiToken
from refunds import services
from refunds.models import Email, Ticket


@pytest.fixture
def outsider(db) -> User:
    return User.objects.create_user("visitor", password="pw")


def test_a_user_in_no_group_opens_nothing_through_the_api(outsider, late_order, on_time_order):
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(outsider)[1]}"})
    for number in ("1042", "1043", "9999"):  # a late order, an on-time one, none at all
        answer = api.post(
            "/api/tickets/", json.dumps({"order_number": number}), content_type="application/json"
        )
        assert answer.status_code == 403, answer.content
        assert "no desk group" in answer.json()["error"]
    assert not Ticket.objects.exists() and not Email.objects.exists()


def test_a_user_in_no_group_opens_nothing_through_the_form(client, outsider, on_time_order):
    client.force_login(outsider)
    assert client.get("/tickets/new/").status_code == 403
    answer = client.post("/tickets/new/", {"order_number": "1043"})
    assert answer.status_code == 403
    answer = client.post("/tickets/new/", {"order_number": "9999"})  # no hint it is missing
    assert answer.status_code == 403 and b"no order" not in answer.content
    assert not Ticket.objects.exists() and not Email.objects.exists()


def test_the_service_refuses_a_person_outside_the_desk_and_lets_the_desk_in(
    outsider, agent, late_order
):
    with pytest.raises(PermissionDenied, match="no desk group"):
        services.ticket_open(order_number="1042", opened_by=outsider)
    assert services.ticket_open(order_number="1042", opened_by=agent).opened_by == agent
