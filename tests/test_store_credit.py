"""Store credit as the customer's choice: an approval that offers it emails the customer once
(a signed link, and a reply address), the thread waits; their choice pays each offered order in
store credit (with the shop's bonus, in a ledger of its own, handed to the shop) or in money,
never both for the same part; no choice by the deadline pays money. Counted where effects land:
refunds at the payment gateway's HTTP sink, emails at the SMTP sink, shop calls at a fake shop."""

from __future__ import annotations

import json
import re
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from devtools.smtp_sink import free_port
from intake.models import Message
from intake.services import message_receive
from refunds import enqueue, policy, runner, services
from refunds.models import Charge, CreditOffer, Decision, StoreCredit, Ticket
from refunds.services import RefundError
from tests import test_parts_flow
from tests.conftest import give_lines, make_order

gateway = test_parts_flow.gateway  # the payment gateway's HTTP sink, and the SMTP sink
REPLY_DOMAIN = "desk.example.com"


@pytest.fixture(autouse=True)
def store_credit(monkeypatch, settings):
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)  # the test runs the threads
    settings.REFUNDS_STORE_CREDIT = True
    settings.REFUNDS_CREDIT_BONUS_PERCENT = 10
    settings.REFUNDS_UNDO_SECONDS = 0
    settings.REFUNDS_REPLY_ADDRESS = "replies+{token}@" + REPLY_DOMAIN
    settings.REFUNDS_PUBLIC_URL = "https://desk.example.com"


@pytest.fixture
def jacket(db):
    order = make_order("3001", late=0, fee_cents=0, name="Ana Souza")
    return give_lines(order, [("Wool jacket", 40000, 1)])


def offered(order, opener, manager, *, offer: bool = True) -> Ticket:
    ticket = services.ticket_open(
        order_number=order.number, opened_by=opener, reason=policy.DAMAGED, note="the jacket"
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    answers = services.review_answers(ticket, answer="approve")
    answers[order.number]["offer_credit"] = offer
    services.ticket_decide(
        ticket=ticket, interrupt_id=ticket.pending_interrupt_id, reviewer=manager, orders=answers
    )
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    return ticket


def delivered(sinks, ticket: Ticket) -> list:
    return [d for d in sinks.smtp.delivered if d.key.startswith(ticket.thread_id)]


def link_in(body: str) -> str:
    found = re.search(r"https://desk\.example\.com(/credit/\S+/)", body)
    assert found, body
    return found[1]


def test_the_customer_is_offered_credit_with_a_bonus_once_and_the_thread_waits(
    transactional_db, gateway, sinks, colleague, manager, jacket
):
    ticket = offered(jacket, colleague, manager)
    assert ticket.status == Ticket.Status.AWAITING_CUSTOMER
    payload = ticket.pending_payload
    assert payload["kind"] == "choice"
    assert (payload["money_cents"], payload["credit_cents"]) == (40000, 44000)
    (offer_mail,) = delivered(sinks, ticket)
    body = offer_mail.body.replace("\r\n", "\n")
    assert "$440.00 in store credit" in body and "(including a bonus of 10%)" in body
    assert "$400.00 back to your card or bank" in body
    assert "CREDIT or REFUND" in body and link_in(body)
    offer = CreditOffer.objects.get(ticket=ticket)
    assert offer.token in offer_mail.reply_to  # a reply finds its offer
    assert runner.advance(ticket.pk) == "awaiting_customer"  # a redelivered wake-up: no 2nd
    assert len(delivered(sinks, ticket)) == 1
    assert gateway.refunds_for(ticket.thread_id) == []


def test_choosing_credit_by_the_link_issues_it_once_and_moves_no_money(
    transactional_db, gateway, sinks, colleague, manager, jacket
):
    ticket = offered(jacket, colleague, manager)
    url = link_in(delivered(sinks, ticket)[0].body)
    customer = Client()
    page = customer.get(url)  # a mail scanner's GET chooses nothing
    assert page.status_code == 200 and b"$440.00 in store credit" in page.content
    assert not Decision.objects.filter(ticket=ticket, answer="credit").exists()
    chosen = customer.post(url, {"choice": "credit"})
    assert chosen.status_code == 200 and b"you chose store credit" in chosen.content
    again = customer.post(url, {"choice": "money"})  # a second click changes nothing
    assert again.status_code == 409
    assert runner.advance(ticket.pk) == "refunded"
    (credit,) = StoreCredit.objects.filter(ticket=ticket)
    assert (credit.amount_cents, credit.bonus_cents, credit.issued_at is not None) == (
        40000,
        4000,
        True,
    )
    assert gateway.refunds_for(ticket.thread_id) == []  # no money moved
    (charge,) = Charge.objects.filter(ticket=ticket)
    assert ":store_credit:" in charge.idempotency_key and charge.receipt == credit.receipt
    told = delivered(sinks, ticket)[-1].body.replace("\r\n", "\n")
    assert "$440.00 in store credit" in told and "ready to use at our shop" in told
    assert "on its way to your bank" not in told
    assert len(delivered(sinks, ticket)) == 2


def test_credit_and_money_are_never_both_paid_for_the_same_part(
    transactional_db, gateway, sinks, colleague, manager, jacket
):
    ticket = offered(jacket, colleague, manager)
    offer = CreditOffer.objects.get(ticket=ticket)
    services.credit_choose(offer=offer, choice="credit", source="test")
    assert runner.advance(ticket.pk) == "refunded"
    line = jacket.lines.get()
    facts = jacket.facts()["lines"][0]
    assert (facts["id"], facts["refunded_quantity"]) == (line.pk, 1)  # the ledger holds it
    again = services.ticket_open(
        order_number=jacket.number, opened_by=colleague, reason=policy.DAMAGED, note="jacket"
    )
    assert runner.advance(again.pk) == "declined"  # nothing left of it to pay in money
    again.refresh_from_db()
    assert "refunded" in again.outcome_reason.lower(), again.outcome_reason
    assert gateway.refunds_for(ticket.thread_id) == []


def test_no_choice_by_the_deadline_pays_money_once(
    transactional_db, gateway, sinks, colleague, manager, jacket, settings
):
    ticket = offered(jacket, colleague, manager)
    later = timezone.now() + timedelta(days=settings.REFUNDS_CREDIT_CHOOSE_DAYS + 1)
    with time_machine.travel(later):
        assert services.offers_wait_timers() == [ticket.pk]
        assert services.offers_wait_timers() == []  # a second beat: once
    assert runner.advance(ticket.pk) == "refunded"
    assert [r["amount_cents"] for r in gateway.refunds_for(ticket.thread_id)] == [40000]
    assert not StoreCredit.objects.exists()
    told = delivered(sinks, ticket)[-1].body
    assert "on its way to your bank" in told and "store credit" not in told


def _reply(offer: CreditOffer, body: str, key: str) -> Message:
    message, _ = message_receive(
        channel="email",
        key=key,
        message_id=key,
        sender="ana@example.com",
        subject="Re: Your refund",
        body=body,
        received_at=timezone.now(),
        raw=body,
        recipients=[f"replies+{offer.token}@{REPLY_DOMAIN}"],
        references=[],
    )
    message.refresh_from_db()
    return message


def test_a_reply_saying_credit_chooses_it_and_one_saying_neither_waits_for_a_person(
    transactional_db, gateway, sinks, colleague, manager, jacket
):
    ticket = offered(jacket, colleague, manager)
    offer = CreditOffer.objects.get(ticket=ticket)
    unclear = _reply(offer, "Hmm, not sure yet.\n> quoted offer", "<r1@customer.test>")
    assert unclear.status == Message.Status.NEEDS_SORTING
    assert "neither CREDIT nor REFUND" in unclear.sorting_reason
    assert runner.advance(ticket.pk) == "awaiting_customer"
    clear = _reply(offer, "Credit please!\n\n> Your refund ...", "<r2@customer.test>")
    assert clear.status == Message.Status.ADDED and clear.ticket_id == ticket.pk
    assert runner.advance(ticket.pk) == "refunded"
    assert StoreCredit.objects.filter(ticket=ticket, issued_at__isnull=False).count() == 1


def test_credit_is_the_only_way_for_the_reasons_the_policy_names(
    transactional_db, gateway, sinks, colleague, manager, jacket, settings
):
    settings.REFUNDS_CREDIT_ONLY_REASONS = [policy.DAMAGED]
    ticket = offered(jacket, colleague, manager, offer=False)
    assert ticket.status == Ticket.Status.REFUNDED, ticket.pending_payload["description"]
    assert not CreditOffer.objects.exists()
    assert StoreCredit.objects.get(ticket=ticket).bonus_cents == 4000
    assert gateway.refunds_for(ticket.thread_id) == []


def test_offering_credit_where_the_shop_does_not_is_refused(
    transactional_db, gateway, colleague, manager, jacket, settings
):
    settings.REFUNDS_STORE_CREDIT = False
    ticket = services.ticket_open(
        order_number=jacket.number, opened_by=colleague, reason=policy.DAMAGED, note="jacket"
    )
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    answers = services.review_answers(ticket, answer="approve")
    answers[jacket.number]["offer_credit"] = True
    with pytest.raises(RefundError, match="does not offer store credit"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=ticket.pending_interrupt_id,
            reviewer=manager,
            orders=answers,
        )


def test_a_link_that_is_not_signed_names_no_offer(transactional_db):
    page = Client().get("/credit/not-a-signed-value/")
    assert page.status_code == 404 and b"not valid" in page.content


class _Shop:
    """POST /shop/store-credits: takes each, keyed; `fail` answers 503 to the next ones."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict]] = []
        self.fail = 0
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if shop.fail:
                    shop.fail -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                shop.posts.append((self.headers["Idempotency-Key"], body))
                answer = json.dumps({"id": f"gc_{len(shop.posts)}"}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_credit_is_handed_to_the_shop_once_through_the_order_source(
    transactional_db, gateway, sinks, colleague, manager, jacket, settings
):
    shop = _Shop()
    settings.REFUNDS_ORDER_SOURCE = f"http://127.0.0.1:{shop.port}/shop"
    shop.fail = 1  # the shop's first answer is a 503: tried again under the same key
    try:
        ticket = offered(jacket, colleague, manager)
        services.credit_choose(
            offer=CreditOffer.objects.get(ticket=ticket), choice="credit", source="test"
        )
        assert runner.advance(ticket.pk) == "refunded"
    finally:
        shop.server.shutdown()
    ((key, body),) = shop.posts
    credit = StoreCredit.objects.get(ticket=ticket)
    assert key == credit.key and body["amount_cents"] == 44000
    assert body["customer_email"] == "ana@example.com" and credit.shop_reference == "gc_1"


def test_the_ticket_page_offers_credit_and_shows_the_wait_for_the_choice(
    transactional_db, gateway, sinks, client, colleague, manager, jacket
):
    ticket = services.ticket_open(
        order_number=jacket.number, opened_by=colleague, reason=policy.DAMAGED, note="jacket"
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    client.force_login(manager)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert 'name="part-3001-offer_credit"' in page and "(+10%)" in page
    line = jacket.lines.get()
    answer = client.post(
        f"/reviews/{ticket.pk}/decide/",
        {
            "interrupt_id": ticket.pending_interrupt_id,
            "approve": "1",
            "parts-3001": "1",
            f"part-3001-qty-{line.pk}": "1",
            "part-3001-offer_credit": "1",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:500]
    assert runner.advance(ticket.pk) == "awaiting_customer"
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert "Waiting on the customer's choice" in page and "$440.00 in store credit" in page
