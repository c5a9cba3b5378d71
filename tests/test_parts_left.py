"""What is left of a line to refund (issue 29): bought, less what the ledger holds of it (refunds
paid and refunds in flight, not those the processor gave back). The parts form's quantity
allows no more (its `max`), a line refunded in full shows as such with no input, and the form
and the decision API refuse a quantity above what is left and record nothing."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from api.models import ApiToken
from refunds import enqueue, policy, runner, services
from refunds.models import Charge, ChargePart, Decision, Order, OrderLine, Ticket
from tests.conftest import give_lines, make_order


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # the test advances itself


@pytest.fixture
def order(transactional_db) -> Order:
    # Two vases ($24.00 each), a runner ($24.50), shipping $6.99.
    return give_lines(
        make_order("1047", fee_cents=699, name="Iris Vale"),
        [("Ceramic vase", 2400, 2), ("Linen table runner", 2450, 1)],
    )


@pytest.fixture
def vase(order) -> OrderLine:
    return order.lines.get(title="Ceramic vase")


@pytest.fixture
def runner_line(order) -> OrderLine:
    return order.lines.get(title="Linen table runner")


def earlier_refund(order: Order, line: OrderLine, units: int, **charge) -> Charge:
    """A refund of `units` of `line` by an earlier ticket of the order, now closed, as the
    ledger (refunds/money.py) writes it: the charge and its part."""
    earlier = Ticket.objects.create(
        thread_id=f"refund-{order.number}-{Ticket.objects.count()}",
        order=order,
        status=Ticket.Status.REFUNDED,
    )
    row = Charge.objects.create(
        ticket=earlier,
        order=order,
        idempotency_key=f"{earlier.thread_id}:charge_card:{order.number}",
        amount_cents=line.unit_price_cents * units,
        **charge,
    )
    ChargePart.objects.create(charge=row, line=line, quantity=units, amount_cents=row.amount_cents)
    return row


@pytest.fixture
def ticket(order, vase, runner_line, agent) -> Ticket:
    """A review of the order after one vase was refunded, the runner's refund is in flight (its
    outcome not known yet) and a second vase's refund was failed by the processor later (its
    unit is back)."""
    earlier_refund(order, vase, 1, status=Charge.Status.SUCCEEDED, receipt="re_1")
    earlier_refund(order, runner_line, 1, status=Charge.Status.PENDING)
    earlier_refund(
        order,
        vase,
        1,
        status=Charge.Status.SUCCEEDED,
        receipt="re_2",
        processor_status=Charge.ProcessorStatus.FAILED,
    )
    opened = services.ticket_open(
        order_number="1047",
        opened_by=agent,
        reason=policy.DAMAGED,
        note="Customer: the vase and the table runner arrived smashed",
    )
    assert runner.advance(opened.pk) == "awaiting_review"
    return Ticket.objects.get(pk=opened.pk)


def row_of(page: str, line: OrderLine) -> str:
    found = re.search(rf'<tr data-line="{line.pk}"[^>]*>.*?</tr>', page, re.S)
    assert found, f"no row for line {line.pk}"
    return found.group()


def test_the_quantity_allows_what_is_left_and_a_line_refunded_in_full_has_no_input(
    client, manager, ticket, vase, runner_line
):
    client.force_login(manager)
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()

    vase_row = row_of(page, vase)
    qty = re.search(rf'<input[^>]*name="part-1047-qty-{vase.pk}"[^>]*>', vase_row)
    assert qty, vase_row
    assert 'min="0" max="1"' in qty.group()  # 2 bought, 1 refunded: the failed one came back
    assert 'value="1"' in qty.group()  # the proposal is what is left, too
    assert "2 bought at $24.00, 1 refunded, 1 left" in vase_row

    runner_row = row_of(page, runner_line)
    assert 'class="refunded-in-full"' in runner_row
    assert "Refunded in full: nothing left to refund" in runner_row
    assert "1 bought at $24.50, 1 refunded</span>" in runner_row
    assert "<input" not in runner_row  # no quantity, amount or restock to give
    assert f"part-1047-qty-{runner_line.pk}" not in page


def test_a_shipping_fee_refunded_already_is_said_and_offers_no_checkbox(
    client, manager, order, vase, agent
):
    earlier = earlier_refund(order, vase, 1, status=Charge.Status.SUCCEEDED, receipt="re_1")
    ChargePart.objects.create(charge=earlier, line=None, amount_cents=order.shipping_fee_cents)
    opened = services.ticket_open(
        order_number="1047", opened_by=agent, reason=policy.DAMAGED, note="the vase is smashed"
    )
    assert runner.advance(opened.pk) == "awaiting_review"
    client.force_login(manager)
    page = client.get(reverse("reviews:ticket", args=[opened.pk])).content.decode()

    assert 'name="part-1047-shipping"' not in page
    assert f"Shipping (${order.shipping_fee_cents / 100:.2f}) refunded already" in page


def decide_on_the_page(client, ticket: Ticket, fields: dict[str, str]):
    return client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {"interrupt_id": ticket.pending_interrupt_id, "approve": "1", "parts-1047": "1"} | fields,
        headers={"HX-Request": "true"},
    )


def test_the_form_refuses_more_than_is_left_and_records_nothing(
    client, manager, ticket, vase, runner_line
):
    client.force_login(manager)

    over = decide_on_the_page(client, ticket, {f"part-1047-qty-{vase.pk}": "2"})
    assert over.status_code == 400
    assert "only 1 of the 2 x Ceramic vase are left to refund" in over.content.decode()
    # A form drawn before the runner's refund (or made by hand) asking for it anyway.
    gone = decide_on_the_page(client, ticket, {f"part-1047-qty-{runner_line.pk}": "1"})
    assert gone.status_code == 400
    assert "only 0 of the 1 x Linen table runner are left" in gone.content.decode()
    assert not Decision.objects.exists()

    what_is_left = decide_on_the_page(client, ticket, {f"part-1047-qty-{vase.pk}": "1"})
    assert what_is_left.status_code in (200, 204, 302), what_is_left.content.decode()[:500]
    assert Decision.objects.get().orders["1047"]["parts"] == [
        {"line": vase.pk, "quantity": 1, "amount_cents": 2400, "restock": False}
    ]


def test_a_refusal_without_htmx_names_the_order_once(client, manager, ticket, vase):
    """The form posted without JavaScript: the refusal comes back as a flash on the page it
    came from, naming the order once although the refusal's own words already name it."""
    client.force_login(manager)
    response = client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {
            "interrupt_id": ticket.pending_interrupt_id,
            "approve": "1",
            "parts-1047": "1",
            f"part-1047-qty-{vase.pk}": "2",
        },
        follow=True,
    )
    page = response.content.decode()
    assert "only 1 of the 2 x Ceramic vase are left to refund" in page
    assert "Order 1047: Order 1047" not in page
    assert not Decision.objects.exists()


def test_the_decision_api_refuses_more_than_is_left_and_records_nothing(
    manager, ticket, vase, runner_line
):
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(manager)[1]}"})

    def decide(parts: list[dict]) -> dict:
        body = {
            "interrupt_id": ticket.pending_interrupt_id,
            "answer": "approve",
            "orders": {"1047": {"answer": "approve", "parts": parts}},
        }
        response = api.post(
            f"/api/tickets/{ticket.pk}/decision/",
            data=json.dumps(body),
            content_type="application/json",
        )
        return {"status": response.status_code, **response.json()}

    over = decide([{"line": vase.pk, "quantity": 2}])
    # The API's refusal of parts the review does not allow (as of an amount above what is
    # asked): 422 with the same words as the form's.
    assert (over["status"], over["code"]) == (422, "unprocessable"), over
    assert "only 1 of the 2 x Ceramic vase are left to refund" in over["error"]
    gone = decide([{"line": runner_line.pk, "quantity": 1}])
    assert gone["status"] == 422 and "only 0 of the 1 x Linen table runner" in gone["error"]
    assert not Decision.objects.exists()
