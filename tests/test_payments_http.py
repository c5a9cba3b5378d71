"""The HTTP gateway (refunds/payments/http.py), against a real HTTP server: one refund per key,
and errors typed by what they mean for the money."""

from __future__ import annotations

import pytest

from devtools.fake_processor import FakeProcessor
from refunds.flow.errors import GatewayOutcomeUnknown
from refunds.payments import PermanentGatewayError, RetryableGatewayError
from refunds.payments.http import HttpGateway

KEY = "refund-1042-t:charge_card:699"


def charge(gateway, key: str = KEY, amount: int = 699) -> str:
    return gateway.charge(idempotency_key=key, amount_cents=amount, ticket_key="refund-1042-t")


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
