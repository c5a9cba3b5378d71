"""One decision shape (issue 43): every answer is per order, as parts; the ticket page's form,
the queue's card and the API expand their shorthands into it before the service, whose check is
the review node's, so what a door accepts the flow applies and nothing a person decided fails a
ticket. Each test is a way the three shapes disagreed before."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from api.models import ApiToken
from refunds import enqueue, policy, runner, services
from refunds.models import Charge, ChargePart, Decision, Email, Ticket
from tests.conftest import give_lines, make_order


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # each test advances itself


def review(ticket: Ticket) -> Ticket:
    assert runner.advance(ticket.pk) == "awaiting_review"
    return Ticket.objects.get(pk=ticket.pk)


def decide_form(html: str, form_id: str) -> dict[str, str]:
    """What the page's decision form posts as it is: every input of the form (inside it or
    pointing at it with form=), a checkbox only when ticked."""
    start = html.index(f'id="{form_id}"')
    opening = html.rfind("<form", 0, start)
    inside = html[opening : html.index("</form>", start)]
    pointing = re.findall(rf'<input[^>]*form="{form_id}"[^>]*>', html)
    posted: dict[str, str] = {}
    for tag in re.findall(r"<input[^>]*>", inside) + pointing:
        name = re.search(r'name="([^"]+)"', tag)
        if not name:
            continue
        if 'type="checkbox"' in tag and "checked" not in tag:
            continue
        value = re.search(r'value="([^"]*)"', tag)
        posted[name.group(1)] = value.group(1) if value else ""
    return posted


def test_an_agent_approves_an_order_with_lines_from_the_ticket_page_as_proposed(
    transactional_db, client, agent, colleague, late_order
):
    """The parts form posts the proposal back unchanged: a plain approval, which an agent may
    make (it was refused as "Only a manager lowers an amount")."""
    give_lines(late_order, [("Ceramic vase", 2400, 2)])
    ticket = review(services.ticket_open(order_number="1042", opened_by=colleague))
    assert ticket.required_role == "agent" and ticket.amount_cents == 699
    client.force_login(agent)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    posted = decide_form(page, f"ticket-decide-{ticket.pk}") | {"approve": "1"}
    assert posted["parts-1042"] == "1" and posted["part-1042-shipping"] == "1"

    response = client.post(f"/reviews/{ticket.pk}/decide/", posted)
    assert response.status_code == 302, response.content.decode()
    decision = Decision.objects.get(ticket=ticket)
    assert decision.reviewer == agent
    assert decision.orders == {
        "1042": {
            "answer": "approve",
            "parts": [{"shipping": True, "amount_cents": 699}],
            "amount_cents": 699,
        }
    }
    assert runner.advance(ticket.pk) == "refunded"
    assert Charge.objects.get(ticket=ticket).amount_cents == 699


def test_a_managers_lower_amount_on_an_order_with_lines_refunds_its_parts_scaled_down(
    transactional_db, client, agent, manager, late_order
):
    """ "Pay $35.00" of the damaged vases' $48.00 on the card: the decision is the vases' line
    for $35.00, and the flow refunds exactly that (it failed the ticket five times before)."""
    give_lines(late_order, [("Ceramic vase", 2400, 2)])
    ticket = review(
        services.ticket_open(
            order_number="1042",
            opened_by=agent,
            reason=policy.DAMAGED,
            note="the vases arrived smashed",
        )
    )
    assert ticket.amount_cents == 4800
    client.force_login(manager)
    posted = {
        "interrupt_id": ticket.pending_interrupt_id,
        "approve": "1",
        "amount": "35.00",
        "reason": "One vase was only chipped.",
    }
    response = client.post(f"/reviews/{ticket.pk}/decide/", posted)
    assert response.status_code == 302
    (line,) = late_order.lines.all()
    one = Decision.objects.get(ticket=ticket).orders["1042"]
    assert one["parts"] == [
        {"line": line.pk, "quantity": 2, "amount_cents": 3500, "restock": False}
    ]
    assert one["reason"] == "One vase was only chipped."

    assert runner.advance(ticket.pk) == "refunded"
    assert list(ChargePart.objects.values_list("line_id", "quantity", "amount_cents")) == [
        (line.pk, 2, 3500)
    ]
    body = Email.objects.get(ticket=ticket).body
    assert "$35.00 of the $48.00 you asked for" in body
    assert "Why not all of it: One vase was only chipped." in body


def test_a_whole_order_approval_of_an_order_paid_below_its_total_refunds_what_was_paid(
    transactional_db, agent, manager, late_order
):
    """The API's whole order on an order bought at a discount: 201, then refunded what the
    customer paid (it answered 201 and the worker failed the ticket on every attempt)."""
    give_lines(late_order, [("Ceramic vase", 2400, 2)])
    late_order.paid_cents = 4500  # $54.99 at full price, paid with a discount
    late_order.save(update_fields=["paid_cents"])
    ticket = review(
        services.ticket_open(
            order_number="1042", opened_by=agent, reason=policy.NOT_RECEIVED, note="never came"
        )
    )
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(manager)[1]}"})
    body = {
        "interrupt_id": ticket.pending_interrupt_id,
        "answer": "approve",
        "orders": {"1042": {"answer": "approve", "parts": [{"whole_order": True}]}},
    }
    response = api.post(
        f"/api/tickets/{ticket.pk}/decision/", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 201, response.json()
    made = response.json()["orders"]["1042"]
    assert made["amount_cents"] == 4500 and len(made["parts"]) == 2  # the vases and shipping

    assert runner.advance(ticket.pk) == "refunded"
    assert Charge.objects.get(ticket=ticket).amount_cents == 4500


def test_the_email_of_three_orders_gives_each_its_own_reason_and_the_true_totals(
    transactional_db, agent, manager
):
    """Approve 1092, reject 1093 with a reason, pay $5.00 of 1094's $6.50 with its own: the
    customer reads each order's own words and the total of all three asked ($29.99), never
    another order's rejection as the reason for paying less."""
    for number, fee in (("1092", 899), ("1093", 1450), ("1094", 650)):
        make_order(number, fee_cents=fee, name="Tomas Lind")
    ticket = review(services.ticket_open(order_numbers=["1092", "1093", "1094"], opened_by=agent))
    decision = services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(
            ticket,
            orders={
                "1092": {"answer": "approve"},
                "1093": {"answer": "reject", "reason": "It arrived during a carrier strike."},
                "1094": {
                    "answer": "approve",
                    "amount_cents": 500,
                    "reason": "The fee was discounted.",
                },
            },
        ),
    )
    assert decision.orders["1094"]["amount_cents"] == 500
    assert runner.advance(ticket.pk) == "refunded"

    body = " ".join(Email.objects.get(ticket=ticket).body.split())
    assert "Order 1094: $5.00 of the $6.50 asked" in body
    assert "because: The fee was discounted." in body
    assert "because: It arrived during a carrier strike" not in body
    assert "Order 1093: It arrived during a carrier strike." in body
    assert "In total: $13.99 of the $29.99 you asked for." in body


def test_an_approval_the_flow_cannot_apply_comes_back_to_the_review_saying_why(
    transactional_db, agent, manager, late_order
):
    """Between the decision and its run the order changed (the shop refunded part of it by
    hand): the flow's check refuses what the desk's accepted, and the review comes back with the
    reason; nothing is paid, nothing fails, and the next answer is applied."""
    give_lines(late_order, [("Ceramic vase", 2400, 2)])
    ticket = review(
        services.ticket_open(
            order_number="1042", opened_by=agent, reason=policy.DAMAGED, note="vases smashed"
        )
    )
    first = ticket.pending_interrupt_id
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=first,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    # The decision as the flow reads it, changed under it: a third vase.
    Decision.objects.filter(ticket=ticket).update(
        orders={"1042": {"answer": "approve", "parts": [{"line": 0, "quantity": 3}]}}
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert ticket.pending_interrupt_id != first and ticket.status == "awaiting_review"
    said = " ".join(ticket.pending_payload["description"].split())
    assert "The decision of manager could not be applied: Order 1042 has no line 0." in said
    assert not Charge.objects.filter(ticket=ticket).exists()

    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    assert Charge.objects.get(ticket=ticket).amount_cents == 4800
