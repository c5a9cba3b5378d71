"""Gateways keep the promise of a real processor: one refund per idempotency key, a lookup that
tells whether a key was charged, and errors typed by what they mean for the money."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from devtools.fake_processor import FakeProcessor
from refunds.flow.errors import GatewayOutcomeUnknown
from refunds.models import Charge, DemoProcessorRefund
from refunds.payments import (
    DemoGateway,
    HttpGateway,
    PermanentGatewayError,
    RetryableGatewayError,
    get_gateway,
)

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


def test_the_gateway_comes_from_the_setting(settings):
    assert settings.REFUNDS_GATEWAY == "refunds.payments.DemoGateway"
    assert isinstance(get_gateway(), DemoGateway)


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


# --- the HTTP gateway, against a real HTTP server ----------------------------------------------
@pytest.fixture
def processor():
    server = FakeProcessor(answer_late_by=0.6).start()
    yield server
    server.stop()


def http(processor: FakeProcessor) -> HttpGateway:
    return HttpGateway(processor.url, timeout=0.3)


def test_the_http_gateway_refunds_once_per_key(processor):
    gateway = http(processor)
    first = charge(gateway)
    assert charge(gateway) == first
    assert processor.charge_calls[KEY] == 2 and len(processor.refunds) == 1
    assert gateway.lookup(KEY) == first
    assert gateway.lookup("never-used") is None


def test_a_key_with_a_slash_is_looked_up_as_one_path_segment(processor):
    # Keys carry the order number, which comes from the shop: "2024/1042" is one.
    gateway = http(processor)
    key = "refund-2024/1042-t:charge_card:699"
    receipt = charge(gateway, key=key)
    assert gateway.lookup(key) == receipt
    assert processor.lookup_calls[key] == 1


def test_a_decline_is_permanent_and_an_unavailable_processor_is_retryable(processor):
    processor.queue("decline", "unavailable")
    with pytest.raises(PermanentGatewayError, match="card_declined"):
        charge(http(processor))
    with pytest.raises(RetryableGatewayError):
        charge(http(processor))
    assert processor.refunds == {}


@pytest.mark.parametrize("behaviour", ["timeout_after", "reset_after", "error_after"])
def test_a_lost_answer_after_the_money_moved_is_an_unknown_outcome(processor, behaviour):
    processor.queue(behaviour)
    with pytest.raises(GatewayOutcomeUnknown):
        charge(http(processor))
    assert len(processor.refunds) == 1  # the money moved: only a lookup can tell


def test_a_processor_that_is_not_listening_is_retryable():
    with pytest.raises(RetryableGatewayError, match="unreachable"):
        charge(HttpGateway("http://127.0.0.1:9", timeout=0.3))
