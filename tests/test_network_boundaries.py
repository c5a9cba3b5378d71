"""No network wait inside a database transaction (DESIGN.md, 6c), checked at every boundary:
each call to another system, made inside a transaction, is refused before anything leaves."""

from __future__ import annotations

import asyncio

import pytest
from django.db import transaction
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from core.network import NetworkInTransaction, outside_transaction
from intake.reader import model
from refunds import carriers, mail, money, order_source
from refunds.models import Email, Ticket
from refunds.payments import DemoGateway
from refunds.payments.demo import DemoProcessorRefund
from webhooks import delivery

REFUSED = pytest.raises(NetworkInTransaction, match="never called inside a database transaction")


def test_the_rule_lets_a_call_through_outside_a_transaction_and_refuses_it_inside(db):
    outside_transaction("the payment gateway")
    with transaction.atomic(), REFUSED:
        outside_transaction("the payment gateway")


def test_the_gateway(db):
    with transaction.atomic(), REFUSED:
        money.pay(
            gateway=DemoGateway(), ticket_id=1, order_id=1, lease=None, key="k", amount_cents=1
        )
    assert not DemoProcessorRefund.objects.exists()


def test_the_mail_server(db, late_order, smtp):
    ticket = Ticket.objects.create(thread_id="t-1", order=late_order, status="refunded")
    email = Email.objects.create(ticket=ticket, key="t-1:email", to="a@example.com", subject="s")
    with transaction.atomic(), REFUSED:
        mail.resend(email.pk)
    assert smtp.count() == 0
    email.refresh_from_db()  # the refusal came before the claim: the row is as it was
    assert (email.status, email.claimed_by, email.attempts) == (Email.Status.PENDING, "", 0)
    assert mail.resend(email.pk) and smtp.count() == 1  # after the transaction, it goes


def test_the_chat_model(db):
    chat = FakeListChatModel(responses=["{}"])
    with transaction.atomic(), REFUSED:
        model.read_with(
            chat,
            spec="fake:x",
            sender="a@example.com",
            subject="s",
            body="b",
            timeout=1,
            attempts=1,
        )
    assert chat.i == 0  # never asked


def test_the_order_source(db, settings):
    settings.REFUNDS_ORDER_SOURCE = "http://127.0.0.1:9"
    with transaction.atomic(), REFUSED:
        order_source.fetch("1042")


def test_the_carrier(transactional_db, late_order, settings):
    settings.REFUNDS_CARRIER = "refunds.carriers.DemoCarrier"
    track = carriers.tracker()
    assert track is not None
    with transaction.atomic(), REFUSED:
        track("1042")
    assert asyncio.run(track("1042"))["delivered_on"] == late_order.delivered_on.isoformat()


def test_webhook_endpoints(db):
    with transaction.atomic(), REFUSED:
        delivery.deliver_due()
