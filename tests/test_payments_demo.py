"""The demo gateway (refunds/payments/demo.py) keeps the promise of a real processor: one refund
per idempotency key, in its own records apart from our ledger, and a lookup by key."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from refunds.models import Charge
from refunds.payments import PermanentGatewayError
from refunds.payments.demo import DemoGateway, DemoProcessorRefund

KEY = "refund-1042-t:charge_card:699"


def charge(gateway, key: str = KEY, amount: int = 699) -> str:
    return gateway.charge(idempotency_key=key, amount_cents=amount, ticket_key="refund-1042-t")


# --- the demo gateway ----------------------------------------------------------------------------
def test_the_demo_gateway_keeps_its_own_records_apart_from_our_ledger(db):
    receipt = charge(DemoGateway())

    assert receipt.startswith("rcpt_")
    assert DemoProcessorRefund.objects.get().receipt == receipt
    assert Charge.objects.count() == 0  # the ledger is refunds/money.py's, around any gateway


def test_a_repeated_key_returns_the_first_receipt_without_a_second_refund(db):
    first = charge(DemoGateway())
    assert charge(DemoGateway()) == first
    assert DemoProcessorRefund.objects.count() == 1


def test_the_demo_gateway_looks_a_key_up(db):
    assert DemoGateway().lookup(KEY) is None
    receipt = charge(DemoGateway())
    assert DemoGateway().lookup(KEY) == receipt


def test_another_key_is_another_refund(db):
    assert charge(DemoGateway()) != charge(DemoGateway(), KEY + ":2")
    assert DemoProcessorRefund.objects.count() == 2


def test_it_refuses_a_reused_key_with_another_amount(db):
    charge(DemoGateway())
    with pytest.raises(PermanentGatewayError, match="was used for 699 cents"):
        charge(DemoGateway(), amount=700)


@pytest.mark.parametrize("amount", [0, -1])
def test_it_refuses_a_non_positive_amount(db, amount):
    with pytest.raises(PermanentGatewayError, match=f"cannot refund {amount} cents"):
        charge(DemoGateway(), amount=amount)
    assert DemoProcessorRefund.objects.count() == 0


def test_four_threads_charging_the_same_key_at_once_make_one_refund(transactional_db):
    racers = 4
    start = threading.Barrier(racers)
    receipts: list[str] = []
    errors: list[BaseException] = []

    def race() -> None:
        try:
            start.wait(timeout=10)
            receipts.append(charge(DemoGateway()))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=race) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert len(receipts) == racers and len(set(receipts)) == 1
    assert DemoProcessorRefund.objects.count() == 1
