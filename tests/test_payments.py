"""The demo gateway keeps the promise of a real one: one charge per idempotency key."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from refunds.models import Charge, Ticket
from refunds.payments import DemoGateway, PermanentGatewayError, get_gateway

KEY = "refund-1042-t:charge_card"


@pytest.fixture
def ticket(late_order) -> Ticket:
    return Ticket.objects.create(thread_id="refund-1042-t", order=late_order)


def test_it_charges_once_and_records_the_charge(ticket):
    receipt = DemoGateway().charge(
        idempotency_key=KEY, amount_cents=699, ticket_key=ticket.thread_id
    )

    charge = Charge.objects.get()
    assert receipt.startswith("rcpt_") and charge.receipt == receipt
    assert (charge.ticket, charge.idempotency_key, charge.amount_cents) == (ticket, KEY, 699)


def test_a_repeated_key_returns_the_first_receipt_without_a_second_charge(ticket):
    gateway = DemoGateway()
    first = gateway.charge(idempotency_key=KEY, amount_cents=699, ticket_key=ticket.thread_id)
    again = DemoGateway().charge(idempotency_key=KEY, amount_cents=699, ticket_key=ticket.thread_id)

    assert again == first
    assert Charge.objects.count() == 1


def test_another_key_is_another_charge(ticket):
    gateway = DemoGateway()
    first = gateway.charge(idempotency_key=KEY, amount_cents=699, ticket_key=ticket.thread_id)
    other = gateway.charge(
        idempotency_key=KEY + ":2", amount_cents=699, ticket_key=ticket.thread_id
    )
    assert first != other
    assert Charge.objects.count() == 2


def test_it_refuses_a_reused_key_with_another_amount(ticket):
    gateway = DemoGateway()
    gateway.charge(idempotency_key=KEY, amount_cents=699, ticket_key=ticket.thread_id)

    with pytest.raises(PermanentGatewayError, match="was used for 699 cents"):
        gateway.charge(idempotency_key=KEY, amount_cents=700, ticket_key=ticket.thread_id)

    assert list(Charge.objects.values_list("amount_cents", flat=True)) == [699]


@pytest.mark.parametrize("amount", [0, -1])
def test_it_refuses_a_non_positive_amount(ticket, amount):
    with pytest.raises(PermanentGatewayError, match=f"cannot charge {amount} cents"):
        DemoGateway().charge(idempotency_key=KEY, amount_cents=amount, ticket_key=ticket.thread_id)
    assert Charge.objects.count() == 0


def test_a_permanent_error_is_marked_permanent():
    assert PermanentGatewayError.permanent is True


def test_the_gateway_comes_from_the_setting(settings):
    assert settings.REFUNDS_GATEWAY == "refunds.payments.DemoGateway"
    assert isinstance(get_gateway(), DemoGateway)


def test_two_threads_charging_the_same_key_at_once_make_one_charge(transactional_db, late_order):
    ticket = Ticket.objects.create(thread_id="refund-1042-race", order=late_order)
    racers = 4
    start = threading.Barrier(racers)
    receipts: list[str] = []
    errors: list[BaseException] = []

    def charge() -> None:
        try:
            start.wait(timeout=10)
            receipts.append(
                DemoGateway().charge(
                    idempotency_key="refund-1042-race:charge_card",
                    amount_cents=699,
                    ticket_key=ticket.thread_id,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=charge) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert len(receipts) == racers and len(set(receipts)) == 1
    assert Charge.objects.count() == 1
    assert Charge.objects.get().receipt == receipts[0]
