"""The order source (refunds/order_source.py): a ticket for an order the desk lacks asks the
shop over HTTP (a real server here), stores what it answers as an Order, and says clearly when
the shop did not answer; nothing is stored from a bad answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client
from django.urls import reverse

from api.models import ApiToken
from devtools.smtp_sink import free_port
from refunds import services
from refunds.models import Order, OrderLine, Ticket

# The shop is never asked inside a transaction, so these tests commit as the app does.
pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {
    "number": "7001",
    "customer_name": "Iris Vale",
    "customer_email": "iris@example.com",
    "promised_on": "2026-11-02",
    "delivered_on": "2026-11-06",
    "shipping_fee_cents": 1299,
    "currency": "eur",
    "payment_reference": "pi_3Pshop7001",
}


class FakeShop:
    """GET /orders/<number>: answers as told, one answer per request ("ok", "slow" past the
    client's timeout, or a status code), then "ok"; counts every request it received."""

    def __init__(self) -> None:
        self.orders = {"7001": dict(ORDER)}
        self.answers: list[str] = []
        self.requests: list[str] = []
        self.auth: list[str | None] = []
        self._lock = threading.Lock()
        self.port = free_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/shop"

    def _handler(self):
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                with shop._lock:
                    shop.requests.append(self.path)
                    shop.auth.append(self.headers.get("Authorization"))
                    answer = shop.answers.pop(0) if shop.answers else "ok"
                if answer == "slow":
                    time.sleep(1.5)
                number = self.path.rsplit("/", 1)[-1]
                found = shop.orders.get(number)
                status = int(answer) if answer.isdigit() else (200 if found else 404)
                out = json.dumps(found if status == 200 else {"error": "no"}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:
                    pass  # the client gave up waiting

        return Handler

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def shop(settings) -> Iterator[FakeShop]:
    fake = FakeShop()
    settings.REFUNDS_ORDER_SOURCE = fake.url
    settings.REFUNDS_ORDER_SOURCE_TIMEOUT = 0.5
    settings.REFUNDS_ORDER_SOURCE_ATTEMPTS = 2
    settings.REFUNDS_ORDER_SOURCE_TOKEN = "shop-token-1234"
    yield fake
    fake.stop()


def test_a_ticket_for_an_order_the_desk_lacks_asks_the_shop_and_stores_it(db, shop):
    ticket = services.ticket_open(order_number="7001")

    order = Order.objects.get(number="7001")
    assert ticket.order == order
    assert (order.customer_name, order.customer_email) == ("Iris Vale", "iris@example.com")
    assert (str(order.promised_on), str(order.delivered_on)) == ("2026-11-02", "2026-11-06")
    assert (order.shipping_fee_cents, order.currency) == (1299, "EUR")
    assert order.payment_reference == "pi_3Pshop7001"
    assert shop.requests == ["/shop/orders/7001"]
    assert shop.auth == ["Bearer shop-token-1234"]


def test_an_order_the_desk_has_is_not_asked_of_the_shop(db, shop, late_order):
    services.ticket_open(order_number="1042")
    assert shop.requests == []


def test_an_order_the_shop_does_not_know_is_no_such_order(db, shop):
    with pytest.raises(services.RefundError, match="There is no order 7002."):
        services.ticket_open(order_number="7002")
    assert shop.requests == ["/shop/orders/7002"]  # a 404 is an answer: not asked again
    assert not Order.objects.exists()


@pytest.mark.parametrize("failure", ["slow", "503"])
def test_a_timeout_or_a_5xx_is_tried_again(db, shop, failure):
    shop.answers = [failure]
    services.ticket_open(order_number="7001")
    assert len(shop.requests) == 2 and Order.objects.filter(number="7001").exists()


@pytest.mark.parametrize("failure", ["slow", "500"])
def test_a_shop_that_never_answers_is_said_so_and_nothing_is_stored(db, shop, failure):
    shop.answers = [failure, failure]
    with pytest.raises(services.ShopUnavailable, match="The shop did not answer for order 7001"):
        services.ticket_open(order_number="7001")
    assert len(shop.requests) == 2
    assert not Order.objects.exists() and not Ticket.objects.exists()


def test_a_4xx_is_permanent_and_asked_once(db, shop):
    shop.answers = ["403"]
    with pytest.raises(services.ShopUnavailable, match=r"The shop refused .* \(403\)"):
        services.ticket_open(order_number="7001")
    assert len(shop.requests) == 1


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"promised_on": None}, "missing promised_on"),
        ({"delivered_on": "06/11/2026"}, "bad date in delivered_on"),
        ({"shipping_fee_cents": 12.99}, "shipping_fee_cents is not a whole number of minor units"),
        ({"shipping_fee_cents": -5}, "shipping_fee_cents is not a whole number of minor units"),
        ({"currency": "euro"}, "currency is too long"),
        ({"currency": "xyz"}, "unknown currency 'xyz'"),
        ({"customer_email": "iris"}, "customer_email 'iris' is not an email address"),
        ({"number": "7009"}, "it describes order '7009'"),
        ({"customer_name": "Iris\x00"}, "customer_name: Null characters are not allowed"),
        ({"customer_email": "i\x00@x.example"}, "customer_email: Null characters"),
        ({"payment_reference": "pi_\x001"}, "payment_reference: Null characters"),
    ],
)
def test_an_answer_that_is_no_order_is_refused_and_nothing_is_stored(db, shop, change, words):
    shop.orders["7001"].update(change)
    with pytest.raises(services.ShopUnavailable, match=words):
        services.ticket_open(order_number="7001")
    assert not Order.objects.exists()


def test_without_an_order_source_an_unknown_order_is_refused_as_before(db, settings):
    settings.REFUNDS_ORDER_SOURCE = ""
    with pytest.raises(services.RefundError, match="There is no order 7001."):
        services.ticket_open(order_number="7001")


# --- where people meet it: the desk's form and the API --------------------------------------------
def test_the_form_tells_the_person_opening_the_ticket_that_the_shop_did_not_answer(
    client, agent, shop
):
    shop.answers = ["503", "503"]
    client.force_login(agent)

    response = client.post(reverse("reviews:ticket_new"), {"order_number": "7001", "note": ""})

    assert response.status_code == 400
    assert "The shop did not answer for order 7001" in response.content.decode()
    assert not Ticket.objects.exists()


@pytest.mark.parametrize("idempotency_key", ["", "open-7001-once"])
def test_the_api_answers_503_with_retry_after_and_then_opens_the_ticket(
    agent, shop, idempotency_key
):
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(agent)[1]}"})
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}

    def post():
        return api.post(
            "/api/tickets/",
            json.dumps({"order_number": "7001"}),
            content_type="application/json",
            headers=headers,
        )

    shop.answers = ["slow", "slow"]
    down = post()
    assert down.status_code == 503
    assert down.json()["code"] == "order_source_unavailable"
    assert "The shop did not answer for order 7001" in down.json()["error"]
    assert down["Retry-After"] == "30"

    up = post()  # the shop answers now; with a key, nothing was kept from the 503
    assert up.status_code == 201, up.content
    assert Ticket.objects.get().order.number == "7001"


def test_the_api_asks_the_shop_for_each_of_order_numbers_before_its_idempotent_transaction(
    agent, shop, late_order, monkeypatch
):
    """Several orders with an Idempotency-Key: the orders the desk lacks are asked of the shop
    first (no network wait inside the key's transaction); one the shop does not know is a 422
    naming it, and nothing is opened."""
    from api import idempotency

    shop.orders["7003"] = dict(ORDER, number="7003")
    inside: list[bool] = []
    real = idempotency.idempotent

    def watched(**kwargs):
        inside.append(True)
        return real(**kwargs)

    monkeypatch.setattr(idempotency, "idempotent", watched)
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(agent)[1]}"})

    def post(numbers, key):
        return api.post(
            "/api/tickets/",
            json.dumps({"order_numbers": numbers}),
            content_type="application/json",
            headers={"Idempotency-Key": key},
        )

    missing = post(["7001", "7002"], "k-missing")
    assert missing.status_code == 422 and "There is no order 7002." in missing.json()["error"]
    assert inside == [] and not Ticket.objects.exists()  # refused before the key's transaction
    opened = post(["7001", "7003"], "k-two")
    assert opened.status_code == 201, opened.content
    assert Ticket.objects.get().order_numbers() == ["7001", "7003"]
    assert shop.requests.count("/shop/orders/7003") == 1  # asked once, before; found inside


LINES = {
    "total_cents": 9497,
    "paid_cents": 9497,
    "lines": [
        {"line_id": "a", "sku": "LMP-2", "title": "Floor lamp", "unit_price_cents": 6999,
         "quantity": 1, "tax_cents": 0},
        {"line_id": "b", "title": "Bulb", "unit_price_cents": 599, "quantity": 2},
    ],
}  # fmt: skip


def test_an_order_with_lines_is_stored_with_them(db, shop):
    shop.orders["7001"].update(LINES)

    services.ticket_open(order_number="7001")

    order = Order.objects.get(number="7001")
    assert (order.total_cents, order.paid_cents) == (9497, 9497)
    assert list(
        order.lines.values_list("line_id", "sku", "title", "unit_price_cents", "quantity")
    ) == [("a", "LMP-2", "Floor lamp", 6999, 1), ("b", "", "Bulb", 599, 2)]


def test_an_order_without_lines_is_stored_without_them(db, shop):
    services.ticket_open(order_number="7001")

    order = Order.objects.get(number="7001")
    assert (order.total_cents, order.paid_cents, order.lines.count()) == (None, None, 0)


def _line(**change) -> dict:
    return {**LINES, "lines": [{**LINES["lines"][0], **change}, LINES["lines"][1]]}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (_line(unit_price_cents=None), r"lines\[0\]: missing unit_price_cents"),
        (_line(quantity=None), r"lines\[0\]: missing quantity"),
        (_line(quantity=0), r"lines\[0\]: quantity must be 1 or more, not 0"),
        (_line(unit_price_cents=69.99), r"lines\[0\]: unit_price_cents is not a whole number"),
        (_line(quantity="1"), r"lines\[0\]: quantity must be a whole number, like 2: '1'"),
        (_line(line_id="b"), r"lines\[1\]: line_id 'b' is also lines\[0\]'s"),
        ({**LINES, "total_cents": 9600}, "total_cents 96.00 EUR does not add up"),
        ({**LINES, "paid_cents": 9600}, "paid_cents 96.00 EUR is more than the total_cents"),
        ({"lines": LINES["lines"]}, "missing total_cents, paid_cents"),
    ],
)
def test_an_answer_whose_lines_do_not_hold_is_refused_and_nothing_is_stored(
    db, shop, change, words
):
    shop.orders["7001"].update(change)
    with pytest.raises(services.ShopUnavailable, match=words):
        services.ticket_open(order_number="7001")
    assert not Order.objects.exists() and not OrderLine.objects.exists()
