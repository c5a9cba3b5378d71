"""A refund as parts of an order in the flow (flow version 6): the policy proposes parts by
reason (refunds/policy.py), an approval carries them to the charge, and the ledger records them;
a thread reviewed under version 5 ends as a refund of the shipping fee, as it would have."""

from __future__ import annotations

import functools
import io
import re

import pytest
from django.core.management import call_command

from refunds import enqueue, payments, persistence, policy, runner, services
from refunds.flow import parts as refund_parts
from refunds.flow import versions
from refunds.models import ChargePart, Decision, Order, OrderLine, Ticket

VASE = {
    "id": 11,
    "title": "Ceramic vase",
    "sku": "VASE-CER",
    "unit_price_cents": 2400,
    "quantity": 2,
    "tax_cents": 0,
    "refunded_quantity": 0,
    "refunded_cents": 0,
}
CHARGER = VASE | {"id": 12, "title": "USB-C charger", "sku": "CHG-65", "unit_price_cents": 3900}
LAPTOP = VASE | {"id": 13, "title": "Laptop 14 inch", "sku": "LAP-14", "unit_price_cents": 89900}
LAPTOP = LAPTOP | {"quantity": 1}
ORDER = {
    "number": "1047",
    "customer_name": "Ana Souza",
    "customer_email": "ana@example.com",
    "promised_on": "2026-11-02",
    "delivered_on": "2026-11-06",
    "fee_cents": 699,
    "refunded_cents": 0,
    "refunded_by_ticket": None,
    "lines": [VASE, CHARGER, LAPTOP],
    "shipping_refunded_cents": 0,
}


def proposed(reason: str, words: str, order: dict = ORDER, late: int = 4):
    return policy.proposed_parts(reason, order, words, late_by_days=late)  # type: ignore[arg-type]


def test_a_late_delivery_proposes_the_shipping_fee():
    assert proposed(policy.LATE_DELIVERY, "it came four days late") == (
        [{"shipping": True, "amount_cents": 699}],
        "Late delivery: the shipping fee.",
    )


def test_a_damaged_item_proposes_the_line_the_customer_names_by_title_or_sku():
    parts, why = proposed(policy.DAMAGED, "The vases arrived smashed into pieces")
    assert parts == [{"line": 11, "quantity": 2, "amount_cents": 4800}]
    assert why == "The customer reports Ceramic vase as damaged."
    parts, _ = proposed(policy.WRONG_ITEM, "I got CHG-65 but ordered something else")
    assert parts == [{"line": 12, "quantity": 2, "amount_cents": 7800}]


def test_a_damaged_item_the_message_does_not_name_ticks_nothing_and_says_so():
    parts, why = proposed(policy.DAMAGED, "it arrived broken")
    assert parts == [] and "nothing is ticked" in why
    # A word two lines share names neither for sure.
    two_lamps = ORDER | {
        "lines": [VASE | {"title": "Desk lamp"}, CHARGER | {"title": "Floor lamp"}]
    }
    parts, why = proposed(policy.DAMAGED, "the lamp is cracked", two_lamps)
    assert parts == [] and "does not say for sure" in why


def test_not_received_naming_a_line_proposes_that_line():
    parts, why = proposed(policy.NOT_RECEIVED, "the box arrived but the charger was missing")
    assert parts == [{"line": 12, "quantity": 2, "amount_cents": 7800}]
    assert why == "The customer reports USB-C charger as missing."


@pytest.mark.parametrize(
    "words",
    [
        "the box arrived but the power adapter was missing",
        "la caja llegó pero faltaba el adaptador",
        "dans le colis il manquait l'adaptateur",
    ],
)
def test_a_part_missing_that_names_no_line_ticks_nothing_and_says_so(words):
    # Not the whole order (the laptop too) for a part the message names in other words.
    parts, why = proposed(policy.NOT_RECEIVED, words)
    assert parts == [] and "does not say for sure which items" in why


@pytest.mark.parametrize(
    "words", ["the box was empty", "my parcel never came", "my parcel is missing", ""]
)
def test_not_received_as_a_whole_parcel_proposes_the_whole_order(words):
    parts, why = proposed(policy.NOT_RECEIVED, words)
    assert parts == [
        {"line": 11, "quantity": 2, "amount_cents": 4800},
        {"line": 12, "quantity": 2, "amount_cents": 7800},
        {"line": 13, "quantity": 1, "amount_cents": 89900},
        {"shipping": True, "amount_cents": 699},
    ]
    assert why == "Not received: the whole order, its items and its shipping."


def test_the_whole_order_is_what_is_left_of_it():
    refunded = ORDER | {
        "lines": [VASE | {"refunded_quantity": 1, "refunded_cents": 2400}, CHARGER],
        "shipping_refunded_cents": 699,
    }
    parts, _ = proposed(policy.NOT_RECEIVED, "never arrived", refunded)
    assert parts == [
        {"line": 11, "quantity": 1, "amount_cents": 2400},
        {"line": 12, "quantity": 2, "amount_cents": 7800},
    ]


def test_another_request_proposes_nothing():
    assert proposed(policy.OTHER_REQUEST, "can I change the colour of the vase?") == (
        [],
        "Another request: nothing is proposed; choose what to refund.",
    )


def test_a_proposal_is_never_more_than_is_left_of_what_was_paid():
    """Bought at a discount ($40.00 paid for $54.99 of vases and shipping): the whole order is
    scaled down to what was paid, part by part, and said so; refunded in full, nothing."""
    discounted = ORDER | {"lines": [VASE], "paid_cents": 4000}
    parts, why = proposed(policy.NOT_RECEIVED, "the box never came", order=discounted)
    assert parts == [
        {"line": 11, "quantity": 2, "amount_cents": 3492},
        {"shipping": True, "amount_cents": 508},
    ]
    assert sum(p["amount_cents"] for p in parts) == 4000
    assert why.endswith(
        "Capped at the $40.00 left of the $40.00 the customer paid (the parts' full prices "
        "come to $54.99)."
    )
    policy.parts_checked(discounted, parts)  # what the review offers passes the one check
    gone = discounted | {"refunded_cents": 4000}
    assert proposed(policy.NOT_RECEIVED, "the box never came", order=gone)[0] == []


def test_an_order_without_lines_proposes_its_shipping_fee_whatever_the_reason():
    no_lines = {k: v for k, v in ORDER.items() if k != "lines"}
    parts, why = proposed(policy.DAMAGED, "the vase is broken", no_lines)
    assert parts == [{"shipping": True, "amount_cents": 699}]
    assert "only its shipping fee" in why


# --- through the flow, counted at the gateway ----------------------------------------------------
@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)


@pytest.fixture
def gateway(settings, sinks, request):
    settings.REFUNDS_GATEWAY = "refunds.payments.HttpGateway"
    settings.REFUNDS_GATEWAY_URL = sinks.gateway.url
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", sinks.smtp.port
    payments.get_gateway.cache_clear()
    request.addfinalizer(payments.get_gateway.cache_clear)
    request.addfinalizer(persistence._compiled.cache_clear)
    return sinks.gateway


def vases(order: Order) -> OrderLine:
    return OrderLine.objects.create(
        order=order,
        line_id="L1",
        sku="VASE-CER",
        title="Ceramic vase",
        unit_price_cents=2400,
        quantity=2,
    )


def damaged_vase(agent) -> Ticket:
    ticket = services.ticket_open(
        order_number="1042",
        opened_by=agent,
        reason=policy.DAMAGED,
        note="Customer: the vase arrived smashed into pieces",
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    return Ticket.objects.get(pk=ticket.pk)


def test_a_damaged_vase_is_proposed_approved_and_refunded_as_its_line(
    transactional_db, agent, manager, late_order, gateway
):
    line = vases(late_order)
    ticket = damaged_vase(agent)
    check = persistence.snapshot(ticket.thread_id).values["checks"]["1042"]
    assert check["parts"] == [{"line": line.pk, "quantity": 2, "amount_cents": 4800}]
    assert check["amount_cents"] == 4800
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    assert [r["amount_cents"] for r in gateway.refunds_for(ticket.thread_id)] == [4800]
    assert list(ChargePart.objects.values_list("line_id", "quantity", "amount_cents")) == [
        (line.pk, 2, 4800)
    ]


def as_version_5(name: str, fn):
    """Version 5's per-order check: no lines read, no parts proposed, the fee its amount; its
    review proposed that fee."""
    if name == "approve":

        @functools.wraps(fn)
        def approve(state, *args, **kwargs):
            checks = {
                n: {"parts": [refund_parts.shipping(c["amount_cents"])]} | c
                for n, c in state["checks"].items()
            }
            return fn(state | {"checks": checks}, *args, **kwargs)

        return approve
    if name != "check_order":
        return fn

    @functools.wraps(fn)
    def check_order(task, *args, **kwargs):
        update = fn(task, *args, **kwargs)
        for check in update["checks"].values():
            for key in ("parts", "parts_why"):
                check.pop(key)
            for key in ("lines", "shipping_refunded_cents"):
                check["order"].pop(key)
            check["balance_cents"] = check["amount_cents"] = check["order"]["fee_cents"]
            check["notes"] = check["notes"][:-1]  # the proposal's sentence
        return update

    return check_order


def test_a_damaged_vase_refused_by_its_manager_is_told_so_without_a_word_of_shipping(
    transactional_db, agent, manager, late_order, sinks, gateway
):
    """Read at the SMTP server: the refusal of an item's refund names the order and the
    manager's reason, never "the shipping fee", which was not what was asked."""
    vases(late_order)
    ticket = damaged_vase(agent)
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(
            ticket, answer="reject", reason="The photos show the vase whole."
        ),
    )
    assert runner.advance(ticket.pk) == "rejected"
    (told,) = [d for d in sinks.smtp.delivered if d.key == f"{ticket.thread_id}:notify"]
    body = told.body.replace("\r\n", "\n")
    assert "about order 1042 and cannot give a refund for it." in body
    assert "The photos show the vase whole." in body and "shipping" not in body


def test_a_review_paused_under_version_5_ends_as_a_shipping_fee_refund(
    transactional_db, agent, manager, late_order, gateway, monkeypatch, settings
):
    """A damaged vase reported under version 5 asked for the shipping fee; carried to version 6
    (manage.py upgrade_threads) and approved, it is refunded that fee under the key version 5
    would have used, not the vase version 6 would propose."""
    vases(late_order)
    real_input = runner.initial_input
    monkeypatch.setattr(
        runner, "initial_input", lambda lease: real_input(lease) | {"flow_version": 5}
    )
    monkeypatch.setattr(runner, "FLOW_VERSION", 5)
    settings.REFUNDS_NODE_WRAPPER = f"{__name__}.as_version_5"
    persistence._compiled.cache_clear()
    ticket = damaged_vase(agent)
    Ticket.objects.filter(pk=ticket.pk).update(flow_version=5)
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == 5
    monkeypatch.undo()  # the release of version 6
    settings.REFUNDS_NODE_WRAPPER = ""
    persistence._compiled.cache_clear()
    call_command("upgrade_threads", stdout=io.StringIO())
    ticket.refresh_from_db()

    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    state = persistence.snapshot(ticket.thread_id).values
    assert state["flow_version"] == versions.FLOW_VERSION == 7
    assert state["checks"]["1042"]["answer"]["parts"] == [{"shipping": True, "amount_cents": 699}]
    key = f"{ticket.thread_id}:charge_card:1042:699"  # version 5's key for the fee
    assert gateway.charge_calls == {key: 1}
    assert list(ChargePart.objects.values_list("line_id", "amount_cents")) == [(None, 699)]


def test_a_damaged_item_the_message_does_not_name_is_not_approved_as_nothing(
    transactional_db, agent, manager, late_order, gateway, client, sinks
):
    """The policy proposes nothing: approving that is refused at the door with what to do (the
    review node would refuse the approval of nothing after it was recorded, and the ticket end
    failed, as it did on the demo), the card offers choosing the parts instead of "Approve
    $0.00" and no tick for bulk approve; approved by the parts ticked on the ticket page it is
    refunded for them alone."""
    line = vases(late_order)
    ticket = services.ticket_open(
        order_number="1042", opened_by=agent, reason=policy.DAMAGED, note="It arrived broken."
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket = Ticket.objects.get(pk=ticket.pk)
    assert ticket.amount_cents == 0
    assert ticket.pending_payload["description"].startswith(
        "**Nothing is proposed to refund** on order **1042**"
    )  # not "Refund $0.00 shipping"

    with pytest.raises(services.RefundError, match="Nothing is proposed to refund for order 1042"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=ticket.pending_interrupt_id,
            reviewer=manager,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert not Decision.objects.exists()
    client.force_login(manager)
    card = client.get("/").content.decode()
    assert "Choose what to refund…" in card and "Approve $0.00" not in card
    assert f'name="pick" value="{ticket.pk}:' not in card

    # The ticket page's parts form ticks nothing either: not the shipping fee (it was ticked,
    # a fee of $0.00 proposed, and approving one vase on the demo refunded the $150.00 fee too).
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    shipping = re.search(r'<input[^>]*name="part-1042-shipping"[^>]*>', page)
    assert shipping and "checked" not in shipping.group()
    answer = client.post(
        f"/reviews/{ticket.pk}/decide/",
        {
            "interrupt_id": ticket.pending_interrupt_id,
            "approve": "1",
            "parts-1042": "1",
            f"part-1042-qty-{line.pk}": "1",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:500]
    assert runner.advance(ticket.pk) == "refunded"
    assert [r["amount_cents"] for r in gateway.refunds_for(ticket.thread_id)] == [2400]
    # Told at the SMTP server what was refunded, not that it is part of a sum no one asked for
    # (it said "of the $206.00 you asked for", the order's balance).
    (told,) = [d for d in sinks.smtp.delivered if d.key == f"{ticket.thread_id}:email"]
    body = told.body.replace("\r\n", "\n")
    assert "We have started a refund of $24.00 for order 1042:" in body
    assert "- 1 x Ceramic vase, $24.00" in body and "asked for" not in body
