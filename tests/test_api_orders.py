"""POST /api/orders/: the shop pushes up to 1,000 orders at once through the import's own checks
and upsert; only a token with the push_orders permission may; Idempotency-Key as for tickets;
every error in the API's one shape."""

from __future__ import annotations

import json

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.test import Client

from api.models import ApiToken, IdempotentRequest
from refunds.models import Charge, Order, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review

URL = "/api/orders/"


def order(number: str, **changes) -> dict:
    return {
        "order_number": number,
        "customer_name": "Ana Souza",
        "customer_email": "ana@example.com",
        "currency": "USD",
        "shipping_fee": "8.99",
        "promised_on": "2026-11-02",
        "delivered_on": "2026-11-06",
        "payment_reference": f"pi_{number}",
        **changes,
    }


@pytest.fixture
def shop(db) -> User:
    """The shop's integration user: in the group the migration made, nothing else."""
    user = User.objects.create_user("shop")
    user.groups.add(Group.objects.get(name="Shop integrations"))
    return user


def client_for(user: User) -> Client:
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(user)[1]}"})


@pytest.fixture
def api(shop) -> Client:
    return client_for(shop)


def push(client: Client, body, **headers):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", headers=headers)


def fees() -> dict[str, int]:
    return dict(Order.objects.values_list("number", "shipping_fee_cents"))


# --- the push -------------------------------------------------------------------------------------
def test_it_creates_updates_and_leaves_orders_and_says_so_per_line(api):
    make_order("7002", fee_cents=100)
    Order.objects.filter(number="7002").update(customer_email="ana@example.com")
    make_order("7003", fee_cents=899)
    Order.objects.filter(number="7003").update(
        customer_email="ana@example.com", payment_reference="pi_7003"
    )

    response = push(
        api,
        {
            "orders": [
                order("7001"),
                order("7002"),
                order("7003"),
                order("7004", currency="XYZ"),
                order("7005", shipping_fee=12.5),
            ]
        },
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["created"], body["updated"], body["unchanged"], body["refused"]) == (2, 1, 1, 1)
    assert [(r["line"], r["order_number"], r["result"]) for r in body["results"]] == [
        (1, "7001", "created"),
        (2, "7002", "updated"),
        (3, "7003", "unchanged"),
        (4, "7004", "refused"),
        (5, "7005", "created"),
    ]
    assert body["results"][3]["reason"] == "unknown currency 'XYZ'"
    assert fees() == {"7001": 899, "7002": 899, "7003": 899, "7005": 1250}


def test_every_refusal_names_its_line_and_reason(api):
    response = push(
        api,
        {
            "orders": [
                order("7101", promised_on="2026-02-30"),
                order("7102", shipping_fee="-3.00"),
                order("7103", currency="ZZZ"),
                order("7104"),
                order("7104", customer_name="Someone else"),
                order("7105", shipping_fee="８.99"),
                "not an order",
                order("7106", colour="red"),
            ]
        },
    )

    assert response.status_code == 200
    reasons = {r["line"]: r["reason"] for r in response.json()["results"]}
    assert reasons[1].startswith("bad date in promised_on: '2026-02-30'")
    assert reasons[2] == "shipping_fee: negative amount '-3.00'"
    assert reasons[3] == "unknown currency 'ZZZ'"
    assert reasons[4] == reasons[5]
    assert reasons[4].startswith("duplicate order number 7104 in this input (lines 4, 5)")
    assert "is not an amount" in reasons[6]
    assert reasons[7] == "a line must be an object with the order's fields"
    assert reasons[8] == "unknown field(s): colour"
    assert not Order.objects.exists()


def test_an_order_with_money_refunded_is_not_changed_by_a_push(api):
    existing = make_order("7201", fee_cents=899)
    ticket = Ticket.objects.create(thread_id="refund-7201-x", order=existing, status="refunded")
    Charge.objects.create(
        ticket=ticket, order=existing, idempotency_key="k", amount_cents=500, status="pending"
    )

    response = push(api, {"orders": [order("7201", shipping_fee="30.00")]})

    (result,) = response.json()["results"]
    assert result["result"] == "refused"
    assert "has 5.00 USD refunded or under way" in result["reason"]
    assert fees() == {"7201": 899}


def test_an_order_under_review_keeps_its_payment_reference_and_says_why(api):
    existing = make_order("7202", fee_cents=899)
    Order.objects.filter(pk=existing.pk).update(
        customer_email="ana@example.com", payment_reference="pi_7202"
    )
    existing.refresh_from_db()
    ticket = awaiting_review(existing)
    before = list(Order.objects.values_list())

    response = push(
        api,
        {"orders": [order("7202", shipping_fee="8.99", payment_reference="pi_someone_else")]},
    )

    (result,) = response.json()["results"]
    assert result["result"] == "refused"
    assert f"order 7202 has an open refund ticket ({ticket.pk})" in result["reason"]
    assert "(payment_reference differ)" in result["reason"]
    assert list(Order.objects.values_list()) == before


def test_an_order_whose_ticket_finished_without_money_takes_the_change(api):
    existing = make_order("7203", fee_cents=899)
    Ticket.objects.create(thread_id="refund-7203-x", order=existing, status="rejected")

    response = push(api, {"orders": [order("7203", payment_reference="pi_corrected")]})

    assert response.json()["results"][0]["result"] == "updated"
    assert Order.objects.get(number="7203").payment_reference == "pi_corrected"


@pytest.mark.parametrize("field", ["order_number", "customer_name", "payment_reference"])
def test_a_nul_is_refused_on_its_line_and_the_good_lines_are_taken(api, field):
    response = push(
        api, {"orders": [order("7301"), order("7302", **{field: "Ana\x00"}), order("7303")]}
    )

    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["result"] for r in results] == ["created", "refused", "created"]
    assert results[1]["reason"] == f"{field}: Null characters are not allowed."
    assert sorted(fees()) == ["7301", "7303"]


def test_a_thousand_orders_are_taken_and_one_more_is_refused_whole(api):
    thousand = [order(f"8{n:04d}") for n in range(1000)]

    response = push(api, {"orders": thousand})
    assert response.status_code == 200, response.content
    assert response.json()["created"] == 1000

    response = push(api, {"orders": [*thousand, order("90000")]})
    assert response.status_code == 400
    body = response.json()
    assert body["status"] == 400 and body["code"] == "invalid"
    assert "At most 1000 orders per request" in body["error"]
    assert "orders" in body["fields"]
    assert Order.objects.count() == 1000


@pytest.mark.parametrize(
    "sent, says",
    [
        ({}, "Missing field: orders"),
        ({"orders": []}, "orders is empty"),
        ({"orders": {"order_number": "1"}}, "orders must be a list"),
        ([order("1")], "The body must be a JSON object"),
        ({"orders": [order("1")], "mode": "replace"}, "Unknown field(s): mode"),
    ],
)
def test_a_malformed_body_answers_400_in_the_one_error_shape(api, sent, says):
    response = push(api, sent)

    assert response.status_code == 400
    body = response.json()
    assert set(body) >= {"status", "code", "error"} and body["status"] == 400
    assert says in body["error"]
    assert not Order.objects.exists()


def test_bad_json_answers_400_in_the_one_error_shape(api):
    response = push(api, '{"orders": [')
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"


# --- who may push ---------------------------------------------------------------------------------
@pytest.mark.parametrize("persona", ["agent", "manager"])
def test_a_desk_token_is_refused_with_403(request, db, persona):
    user = request.getfixturevalue(persona)

    response = push(client_for(user), {"orders": [order("7301")]})

    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"
    assert "refunds.push_orders" in response.json()["error"]
    assert not Order.objects.exists()


def test_no_token_answers_401(db):
    response = push(Client(), {"orders": [order("7301")]})
    assert response.status_code == 401
    assert not Order.objects.exists()


def test_the_permission_alone_is_enough(db):
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("shop2")
    user.user_permissions.add(Permission.objects.get(codename="push_orders"))

    assert push(client_for(user), {"orders": [order("7302")]}).status_code == 200


# --- idempotency ----------------------------------------------------------------------------------
def test_a_replay_with_the_same_key_answers_the_first_response(api):
    body = {"orders": [order("7401")]}
    first = push(api, body, **{"Idempotency-Key": "push-1"})
    Order.objects.filter(number="7401").update(shipping_fee_cents=1)  # changed since

    again = push(api, body, **{"Idempotency-Key": "push-1"})

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again.json()["created"] == 1
    assert fees() == {"7401": 1}  # the replay wrote nothing
    assert again["Idempotency-Key"] == "push-1"
    assert IdempotentRequest.objects.count() == 1


def test_a_nul_refused_on_its_line_is_answered_with_a_key_as_without_and_replayed(api):
    """The answer names the order number as sent, NUL and all; PostgreSQL's jsonb could not
    keep it (a 500 with the key, after the good orders were written and rolled back)."""
    body = {"orders": [order("7401"), order("7402\x00")]}
    first = push(api, body, **{"Idempotency-Key": "push-nul"})
    again = push(api, body, **{"Idempotency-Key": "push-nul"})

    assert first.status_code == again.status_code == 200
    results = first.json()["results"]
    assert [(r["order_number"], r["result"]) for r in results] == [
        ("7401", "created"),
        ("7402\x00", "refused"),
    ]
    assert results[1]["reason"] == "order_number: Null characters are not allowed."
    assert again.json() == first.json() and set(fees()) == {"7401"}


def test_the_same_key_with_another_body_answers_422(api):
    push(api, {"orders": [order("7501")]}, **{"Idempotency-Key": "push-2"})

    response = push(api, {"orders": [order("7502")]}, **{"Idempotency-Key": "push-2"})

    assert response.status_code == 422
    assert response.json()["code"] == "unprocessable"
    assert set(fees()) == {"7501"}


def test_a_large_push_fits_its_own_body_limit(api, settings):
    settings.API_MAX_BODY_BYTES = 1024
    settings.API_ORDERS_MAX_BODY_BYTES = 4096
    assert push(api, {"orders": [order(f"76{n:02d}") for n in range(10)]}).status_code == 200
    too_big = push(api, {"orders": [order(f"77{n:02d}") for n in range(30)]})
    assert too_big.status_code == 413
    assert "at most 4096 bytes" in too_big.json()["error"]


# --- the schema -----------------------------------------------------------------------------------
def test_the_schema_documents_the_push(client, db):
    spec = yaml.safe_load(client.get("/api/schema/").content)
    post = spec["paths"]["/api/orders/"]["post"]
    assert post["operationId"] == "orders_push"
    assert {"200", "400", "401", "403", "413", "422"} <= set(post["responses"])
    assert any(p["name"] == "Idempotency-Key" for p in post["parameters"])
    schemas = spec["components"]["schemas"]
    request_ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    orders = schemas[request_ref.rsplit("/", 1)[1]]["properties"]["orders"]
    assert orders["maxItems"] == 1000
    # Any value: a line that does not fit is refused on its own; the example shows a good one.
    assert "type" not in orders["items"] and "refused on its own" in orders["items"]["description"]
    assert set(orders["items"]["example"]) == {
        "order_number",
        "customer_name",
        "customer_email",
        "currency",
        "shipping_fee",
        "promised_on",
        "delivered_on",
        "payment_reference",
        "total",
        "paid",
        "lines",
    }


def test_an_erased_order_is_not_given_its_customer_back_by_a_push(api):
    """The shop's next sync sends the order with the customer's name and address again: the
    desk keeps it pseudonymised (ops/forgetting.py) and says why."""
    from django.utils import timezone

    existing = make_order("7203", fee_cents=899)
    Order.objects.filter(pk=existing.pk).update(
        customer_name="Erased customer erased-1",
        customer_email="erased-1@erased.invalid",
        erased_at=timezone.now(),
    )
    before = list(Order.objects.values_list())

    (result,) = push(api, {"orders": [order("7203", shipping_fee="8.99")]}).json()["results"]

    assert result["result"] == "refused"
    assert "Order 7203's customer was erased on" in result["reason"]
    assert list(Order.objects.values_list()) == before
