"""One home each: what an order number is, "the same customer", the per-order answers and the
"being paid out" sentence; every caller asks the one rule, so they refuse and say alike."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.bodies import TicketOpen
from refunds import policy
from refunds.models import Order, of_customer, order_number_read, same_customer
from refunds.order_in import LineRefused, OrderIn
from refunds.services import RefundError
from refunds.services.tickets import order_numbers_clean
from reviews import forms
from tests.conftest import make_order

LINE = {
    "customer_name": "Ana",
    "currency": "USD",
    "customer_email": "ana@example.com",
    "shipping_fee": "8.99",
    "promised_on": "2026-01-01",
    "delivered_on": "2026-01-04",
}


@pytest.mark.parametrize("bad", ["9" * 33, "10\x0042", "10 42", "#", True, 1.5])
def test_every_way_in_refuses_what_is_not_an_order_number(bad):
    with pytest.raises(ValueError):
        order_number_read(bad)
    with pytest.raises(RefundError):
        order_numbers_clean([bad])
    with pytest.raises(ValidationError):
        TicketOpen.model_validate({"order_number": bad})
    with pytest.raises(ValidationError):
        TicketOpen.model_validate({"order_numbers": [bad]})
    if isinstance(bad, str) and bad.strip("# "):
        with pytest.raises(LineRefused):
            OrderIn.read({**LINE, "order_number": bad})


@pytest.mark.parametrize(
    ("written", "number"), [("#1042", "1042"), (" 1042 ", "1042"), (1042, "1042")]
)
def test_every_way_in_reads_an_order_number_alike(written, number):
    assert order_number_read(written) == number
    assert order_numbers_clean([written]) == [number]
    assert TicketOpen.model_validate({"order_number": written}).order_number == number
    assert TicketOpen.model_validate({"order_numbers": [written]}).order_numbers == [number]
    assert OrderIn.read({**LINE, "order_number": written}).number == number


def test_the_same_customer_is_the_same_address_whatever_its_case_in_python_and_in_sql(db):
    make_order("1042")  # ana@example.com
    assert same_customer("Ana@Example.COM ", "ana@example.com")
    assert not same_customer("ana@example.co", "ana@example.com")
    assert [o.number for o in of_customer(Order.objects.all(), "Ana@Example.COM ")] == ["1042"]
    assert not of_customer(Order.objects.all(), "ana@example.co").exists()


LINES = [
    {
        "number": number,
        "status": "open",
        "amount_cents": fee,
        "parts": [{"shipping": True, "amount_cents": fee}],
        "order": {"number": number, "fee_cents": fee, "refunded_cents": 0, "lines": []},
    }
    for number, fee in [("1042", 699), ("1044", 500)]
]


@pytest.mark.parametrize(
    ("post", "error"),
    [
        ({"order-1042": "approve"}, "Choose approve or reject for order 1044."),
        (
            {"order-1042": "approve", "amount-1042": "7.00", "order-1044": "reject"},
            "Order 1042: the new amount must be more than $0.00 and at most the $6.99 proposed.",
        ),
    ],
)
def test_the_form_and_the_api_say_the_same_words_for_the_same_answer(post, error):
    """The form's fields and the API's body are expanded by one function and checked by one:
    the same answer is refused with the same words by either door."""
    from refunds.flow import answers

    def refusal(given: dict) -> str:
        with pytest.raises(ValueError) as refused:
            answers.checked(LINES, answers.expanded(LINES, orders=given))
        return str(refused.value)

    by_form = refusal(forms._own_answers(post, LINES, {}))
    by_api = refusal(
        {
            n: {"answer": post.get(f"order-{n}", "")}
            | ({"amount_cents": 700} if f"amount-{n}" in post else {})
            for n in ("1042", "1044")
        }
    )
    assert by_form == by_api == error


def test_an_approval_is_said_one_way():
    assert policy.paid_out_words(699, ["1042"]) == "Approved $6.99 for order 1042 — being paid out"
    assert policy.paid_out_words(500, ["1042"], asked_cents=699, rejected=["1049"]) == (
        "Approved $5.00 (instead of $6.99) for order 1042, rejected 1049 — being paid out"
    )
