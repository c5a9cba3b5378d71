"""`manage.py stripe_fails_refund` (devtools/): the demo's way to see a refund Stripe fails later.
localstripe's launcher marks the refund failed in the emulator's own store (no test-side wrapper
here), and the command posts the signed events to the desk's webhook over HTTP (a live server),
whose worker re-reads the refund from localstripe and gives the ticket back to a manager."""

from __future__ import annotations

import urllib.error

import pytest
from django.core.management import CommandError, call_command

from refunds import money, runner, tasks
from refunds.models import Charge, StripeEvent, Ticket
from refunds.services.stripe_events import HANDLE
from tests.test_settings import manage_check
from tests.test_stripe_events import stripe_desk as stripe_desk  # noqa: F401 - a fixture
from tests.test_stripe_failed_later import CLOSED, refunded
from tests.test_stripe_failed_later import desk as desk  # noqa: F401 - a fixture
from tests.test_stripe_failed_later import woken as woken  # noqa: F401 - a fixture


@pytest.fixture
def demo(settings):
    settings.DEMO = True
    settings.DEBUG = True


def fail(ticket_or_refund: str, localstripe, live_server, **options) -> None:
    port = int(localstripe.url.rsplit(":", 1)[1])
    call_command(
        "stripe_fails_refund", ticket_or_refund, port=port, desk=live_server.url, **options
    )


def test_it_fails_the_refund_at_localstripe_and_the_desk_hands_the_ticket_back(
    live_server, manager, desk, smtp, woken, demo
):
    ticket = refunded(desk, "4401", manager)
    charge = Charge.objects.get(ticket=ticket)
    assert money.refundable_cents(ticket.order) == 0

    fail(str(ticket.pk), desk, live_server)

    # Stripe's side says failed on every read, as localstripe holds it now.
    [refund] = desk.refunds(ticket.order.payment_reference)
    assert (refund["id"], refund["status"]) == (charge.receipt, "failed")
    assert refund["failure_reason"] == "expired_or_canceled_card"
    assert desk.call("GET", f"/v1/refunds/{refund['id']}")["status"] == "failed"
    # The desk stored both events, signed as Stripe signs them; its worker re-reads the refund.
    stored = list(StripeEvent.objects.order_by("pk").values_list("type", flat=True))
    assert stored == ["refund.failed", "charge.refund.updated"]
    for task, pk in list(woken):
        if task == HANDLE:
            tasks.handle_stripe_event(pk)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket = Ticket.objects.get(pk=ticket.pk)
    charge.refresh_from_db()
    assert (ticket.status, ticket.required_role) == ("awaiting_review", "manager")
    assert CLOSED.split(":")[0] in ticket.pending_payload["description"]
    assert (charge.processor_status, charge.failure_reason) == (
        "failed",
        "expired_or_canceled_card",
    )
    assert money.refundable_cents(ticket.order) == 699
    failures = [d for d in smtp.delivered if ":refund_failed:" in d.key]
    assert [d.subject for d in failures] == ["Your refund for order 4401 did not go through"]


def test_a_refund_that_failed_already_cannot_fail_again(live_server, manager, desk, woken, demo):
    ticket = refunded(desk, "4402", manager)
    receipt = Charge.objects.get(ticket=ticket).receipt
    fail(receipt, desk, live_server, reason="lost_or_stolen_card")

    with pytest.raises(CommandError, match="is failed: it cannot fail now"):
        fail(receipt, desk, live_server)

    assert StripeEvent.objects.count() == 2  # the first failure's two events, no more


def test_it_says_when_the_desk_takes_no_events(live_server, manager, desk, woken, demo, settings):
    ticket = refunded(desk, "4403", manager)
    settings.STRIPE_WEBHOOK_SECRET = ""  # the desk started without it

    with pytest.raises(CommandError, match="start bin/run with STRIPE_WEBHOOK_SECRET=whsec_"):
        fail(str(ticket.pk), desk, live_server)

    assert not StripeEvent.objects.exists()


def test_localstripe_fails_only_a_refund_it_has(localstripe):
    with pytest.raises(urllib.error.HTTPError) as refused:
        localstripe.fail_refund("re_nosuchrefund")

    assert refused.value.code == 404


def test_it_refuses_to_run_outside_the_demo(tmp_path):
    result = manage_check(
        tmp_path,
        "stripe_fails_refund",
        "1",
        REFUNDS_DEMO="false",
        REFUNDS_ALLOW_FAKES="true",
        SECRET_KEY="x" * 50,
    )

    assert result.returncode != 0
    assert "demo only" in result.stderr
    assert "Traceback" not in result.stderr
