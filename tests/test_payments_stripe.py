"""StripeGateway (refunds/payments/stripe.py) against localstripe, a stateful Stripe emulator run
as a real HTTP server (the `localstripe` fixture): refunds are counted where they land. Faults the
emulator cannot make (a rate limit, an answer lost after the refund was made) come from a
loopback proxy in front of it (devtools/localstripe.py's StripeFaults)."""

from __future__ import annotations

import logging
import sys
import urllib.error

import pytest
from django.test import Client
from django.urls import include, path

from devtools.localstripe import SECRET_KEY, StripeFaults
from devtools.smtp_sink import free_port
from refunds import lease as leases
from refunds import money
from refunds.checks import stripe_settings
from refunds.flow.errors import (
    GatewayOutcomeUnknown,
    PermanentGatewayError,
    RetryableGatewayError,
)
from refunds.flow.nodes.charge import charge_key
from refunds.models import Charge, OrderLine, Ticket
from refunds.payments import get_gateway
from refunds.payments.stripe import StripeGateway
from tests.conftest import make_order

KEY = "refund-1042-s:charge_card:699"


LATE_TIMEOUT = 1.0


def gateway(base: str, *, timeout: float = 2.0) -> StripeGateway:
    return StripeGateway(secret_key=SECRET_KEY, api_base=base, timeout=timeout)


def charge(gw: StripeGateway, reference: str, key: str = KEY, amount: int = 699) -> str:
    return gw.charge(
        idempotency_key=key,
        amount_cents=amount,
        ticket_key="refund-1042-s",
        payment_reference=reference,
    )


@pytest.fixture
def faults(localstripe):
    # The late answer comes 3 s after the request; the gateway under test gives up after 1 s
    # (LATE_TIMEOUT), which leaves localstripe a second for the lookup on a loaded machine.
    proxy = StripeFaults(localstripe.url, late_by=3.0).start()
    yield proxy
    proxy.stop()


# --- refunds at Stripe -------------------------------------------------------------------------
def test_a_refund_gives_back_the_amount_asked_from_the_payment_intent(localstripe):
    paid = localstripe.payment_intent(5699)  # goods and a $6.99 shipping fee

    receipt = charge(gateway(localstripe.url), paid)

    [refund] = localstripe.refunds(paid)
    assert (refund["id"], refund["amount"]) == (receipt, 699)
    assert refund["metadata"] == {"refund_desk_key": KEY, "ticket": "refund-1042-s"}


def test_our_charge_key_is_the_requests_idempotency_key(localstripe, faults):
    """What makes a repeated request one refund at Stripe (not at localstripe: see below)."""
    paid = localstripe.payment_intent(5699)

    charge(gateway(faults.url), paid)

    assert faults.idempotency_keys == [KEY]


def test_a_charge_reference_is_refunded_too(localstripe):
    paid = localstripe.payment_intent(5699)
    latest = localstripe.call("GET", f"/v1/payment_intents/{paid}")["latest_charge"]
    charge_id = latest["id"] if isinstance(latest, dict) else latest  # localstripe expands it

    receipt = charge(gateway(localstripe.url), charge_id)

    assert [(r["id"], r["amount"]) for r in localstripe.refunds(charge_id)] == [(receipt, 699)]


def test_lookup_finds_a_refund_by_the_key_in_its_metadata(localstripe):
    paid = localstripe.payment_intent(5699)
    gw = gateway(localstripe.url)
    charge(gw, paid, key="another-ticket:charge_card:100", amount=100)
    assert gw.lookup(KEY, payment_reference=paid) is None

    receipt = charge(gw, paid)

    assert gw.lookup(KEY, payment_reference=paid) == receipt
    assert gw.lookup(KEY, payment_reference="") is None  # charge() sends nothing without one


# --- Stripe's errors, by what they mean for the money ------------------------------------------
def test_an_unknown_payment_intent_is_refused_for_good(localstripe):
    with pytest.raises(PermanentGatewayError, match="Stripe refused the refund"):
        charge(gateway(localstripe.url), "pi_NoSuchPayment")


@pytest.mark.parametrize("reference", ["", "1042", "cus_123"])
def test_a_reference_stripe_cannot_refund_is_refused_before_anything_is_sent(
    localstripe, faults, reference
):
    with pytest.raises(PermanentGatewayError, match="payment reference"):
        charge(gateway(faults.url), reference)
    assert faults.refund_posts == 0


def test_a_rate_limit_is_retryable_and_refunds_nothing(localstripe, faults):
    paid = localstripe.payment_intent(5699)
    faults.queue("rate_limited")

    with pytest.raises(RetryableGatewayError, match="rate limit"):
        charge(gateway(faults.url), paid)
    assert localstripe.refunds(paid) == []


def test_an_unreachable_stripe_is_retryable():
    with pytest.raises(RetryableGatewayError, match="Stripe unreachable"):
        charge(gateway(f"http://127.0.0.1:{free_port()}"), "pi_Anything")


@pytest.mark.parametrize("behaviour", ["answer_late", "reset_after"])
def test_an_answer_lost_after_the_request_left_is_an_unknown_outcome(
    localstripe, faults, behaviour
):
    paid = localstripe.payment_intent(5699)
    faults.queue(behaviour)

    with pytest.raises(GatewayOutcomeUnknown):
        charge(gateway(faults.url, timeout=LATE_TIMEOUT), paid)
    assert [r["amount"] for r in localstripe.refunds(paid)] == [699]  # the money did move


# --- with the ledger: money moves once ---------------------------------------------------------
@pytest.fixture
def ticket_paid_at_stripe(db, localstripe) -> Ticket:
    order = make_order("1042")
    order.payment_reference = localstripe.payment_intent(5699)
    order.save()
    return Ticket.objects.create(thread_id="refund-1042-s", order=order)


def pay(gw: StripeGateway, ticket: Ticket) -> str:
    """money.pay as a run holding the ticket's lease does it."""
    lease = getattr(ticket, "held", None) or leases.grant(ticket)
    assert lease is not None
    ticket.held = lease  # type: ignore[attr-defined]  # a second pay is the same run's
    return money.pay(
        gateway=gw,
        ticket_id=ticket.pk,
        order_id=ticket.order_id,
        lease=lease,
        key=KEY,
        amount_cents=699,
    )


def test_the_ledger_pays_once_although_stripe_here_ignores_the_idempotency_key(
    localstripe, ticket_paid_at_stripe
):
    gw = gateway(localstripe.url)
    receipt = pay(gw, ticket_paid_at_stripe)

    assert pay(gw, ticket_paid_at_stripe) == receipt
    reference = ticket_paid_at_stripe.order.payment_reference
    assert [r["id"] for r in localstripe.refunds(reference)] == [receipt]
    assert Charge.objects.get().receipt == receipt


def test_a_lost_answer_is_resolved_by_lookup_before_any_retry(
    localstripe, faults, ticket_paid_at_stripe
):
    faults.queue("answer_late")
    gw = gateway(faults.url, timeout=LATE_TIMEOUT)

    receipt = pay(gw, ticket_paid_at_stripe)  # timed out, then found by its metadata

    reference = ticket_paid_at_stripe.order.payment_reference
    assert [r["id"] for r in localstripe.refunds(reference)] == [receipt]
    assert Charge.objects.get().status == Charge.Status.SUCCEEDED
    assert pay(gw, ticket_paid_at_stripe) == receipt
    assert faults.refund_posts == 1


def test_a_refusal_frees_the_balance_and_says_no_money_moved(localstripe, db):
    order = make_order("1042")
    order.payment_reference = "pi_NoSuchPayment"
    order.save()
    ticket = Ticket.objects.create(thread_id="refund-1042-s", order=order)

    with pytest.raises(PermanentGatewayError):
        pay(gateway(localstripe.url), ticket)
    assert Charge.objects.get().status == Charge.Status.REFUSED
    assert order.refunded_cents() == 0


# --- what localstripe lacks (so that nothing here leans on it) ---------------------------------
def test_localstripe_ignores_the_idempotency_key(localstripe):
    """Real Stripe answers a repeated Idempotency-Key with the first refund; localstripe makes a
    second one. Tests that count refunds there prove "once" through our ledger and lookup."""
    paid = localstripe.payment_intent(5699)
    gw = gateway(localstripe.url)

    assert charge(gw, paid) != charge(gw, paid)
    assert len(localstripe.refunds(paid)) == 2


def test_localstripe_has_no_refund_search(localstripe):
    """Nor has Stripe: lookup() lists the payment's refunds and matches the metadata."""
    with pytest.raises(urllib.error.HTTPError) as answer:
        localstripe.call("GET", "/v1/refunds/search?query=metadata%5B%27k%27%5D%3A%27v%27")
    assert answer.value.code == 404


# --- settings and secrets ----------------------------------------------------------------------
def test_the_gateway_is_chosen_by_the_setting_and_reads_its_settings(settings, localstripe):
    settings.REFUNDS_GATEWAY = "refunds.payments.StripeGateway"
    settings.STRIPE_SECRET_KEY = SECRET_KEY
    settings.STRIPE_API_BASE = localstripe.url
    get_gateway.cache_clear()
    try:
        chosen = get_gateway()
        assert isinstance(chosen, StripeGateway)
        paid = localstripe.payment_intent(1000)
        assert chosen.lookup(KEY, payment_reference=paid) is None
    finally:
        get_gateway.cache_clear()


@pytest.mark.parametrize(
    ("key", "check_id"),
    [("", "refunds.E003"), ("pk_test_publishable123", "refunds.E004")],
)
def test_the_system_check_wants_a_secret_stripe_key(settings, key, check_id):
    settings.REFUNDS_GATEWAY = "refunds.payments.StripeGateway"
    settings.STRIPE_SECRET_KEY = key

    [error] = stripe_settings(None)

    assert error.id == check_id
    assert "pk_test_publishable123" not in error.msg


def test_the_system_check_is_quiet_with_a_secret_key_or_another_gateway(settings):
    settings.REFUNDS_GATEWAY = "refunds.payments.StripeGateway"
    settings.STRIPE_SECRET_KEY = "rk_live_restricted123"
    assert stripe_settings(None) == []
    settings.REFUNDS_GATEWAY = "refunds.payments.DemoGateway"
    settings.STRIPE_SECRET_KEY = ""
    assert stripe_settings(None) == []


LIVE_KEY = "sk_live_51NotARealKeyButLongEnough"


def _explode(request):
    gw = StripeGateway(secret_key=LIVE_KEY, api_base="https://api.stripe.com")  # noqa: F841
    raise RuntimeError(f"Stripe said: invalid key {LIVE_KEY}")


urlpatterns = [path("explode/", _explode), path("", include("config.urls"))]


def test_the_stripe_key_is_masked_on_error_pages_and_in_logs(db, settings, capsys):
    settings.DEBUG = True  # the worst case: Django's technical page, with frame variables
    settings.ROOT_URLCONF = __name__
    settings.STRIPE_SECRET_KEY = LIVE_KEY
    from core.logs import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        page = Client(raise_request_exception=False).get("/explode/")
    finally:
        logger.removeHandler(handler)

    assert page.status_code == 500
    assert b"Stripe said: invalid key" in page.content
    assert LIVE_KEY.encode() not in page.content
    logged = capsys.readouterr().err
    assert "Stripe said: invalid key" in logged
    assert LIVE_KEY not in logged
    assert LIVE_KEY not in repr(StripeGateway(secret_key=LIVE_KEY))


def test_a_refund_of_parts_names_its_lines_and_quantities_in_its_metadata(
    localstripe, ticket_paid_at_stripe
):
    """One Refund per order for the parts' sum; the shop's books read what it gives back and
    which items come back from its metadata."""
    vase = OrderLine.objects.create(
        order=ticket_paid_at_stripe.order,
        line_id="L1",
        title="Ceramic vase",
        unit_price_cents=2400,
        quantity=2,
    )
    ticket = ticket_paid_at_stripe
    lease = leases.grant(ticket)
    assert lease is not None
    parts = [
        {"line": vase.pk, "quantity": 1, "amount_cents": 2400, "restock": True},
        {"shipping": True, "amount_cents": 699},
    ]
    receipt = money.pay(
        gateway=gateway(localstripe.url),
        ticket_id=ticket.pk,
        order_id=ticket.order_id,
        lease=lease,
        key=charge_key(ticket.thread_id, "1042", 3099, parts),
        amount_cents=3099,
        parts=parts,
    )
    [refund] = localstripe.refunds(ticket.order.payment_reference)
    assert (refund["id"], refund["amount"]) == (receipt, 3099)
    assert refund["metadata"]["parts"] == f"{vase.pk}x1,shipping"
    assert refund["metadata"]["restock"] == str(vase.pk)
