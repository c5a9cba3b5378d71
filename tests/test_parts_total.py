"""The parts form's live total (reviews:parts_total, issue 29): as a reviewer changes an order's
parts, the total and what is left of what was paid, by the rule the decision uses
(policy.parts_checked); parts the decision would refuse are a 400 that says why in the same
words the decision's own refusal uses."""

from __future__ import annotations

import pytest
from django.urls import reverse

from refunds import enqueue, policy, runner, services
from refunds.models import Decision, OrderLine, Ticket
from tests.conftest import give_lines, make_order


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # the test advances itself


@pytest.fixture
def order(transactional_db):
    # Two vases ($24.00 each), a runner ($24.50), shipping $6.99: $79.49 paid.
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


@pytest.fixture
def ticket(order, agent) -> Ticket:
    opened = services.ticket_open(
        order_number="1047",
        opened_by=agent,
        reason=policy.DAMAGED,
        note="Customer: the vase arrived smashed",
    )
    assert runner.advance(opened.pk) == "awaiting_review"
    return Ticket.objects.get(pk=opened.pk)


def total(client, ticket: Ticket, **fields: str):
    query = {"parts-1047": "1"} | {k.replace("_", "-"): v for k, v in fields.items()}
    return client.get(
        reverse("reviews:parts_total", args=[ticket.pk]), query, headers={"HX-Request": "true"}
    )


def qty(line: OrderLine) -> str:
    return f"part_1047_qty_{line.pk}"


def test_the_ticket_page_asks_for_the_total_and_shows_the_proposals(client, manager, ticket):
    client.force_login(manager)
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    url = reverse("reviews:parts_total", args=[ticket.pk])
    assert 'fieldset class="parts" data-order="1047" hx-include="this"' in page
    assert page.count(f'hx-get="{url}" hx-trigger="input delay:300ms"') == 2 * 3 + 2
    # The proposal: both vases, $48.00 of the $79.49 paid, $31.49 left.
    assert 'Refund <strong class="parts-sum-total">$48.00</strong>' in page
    assert "$31.49 left to refund of the $79.49 paid" in page


def test_the_total_follows_the_quantities_the_amounts_and_the_shipping(
    client, manager, ticket, vase, runner_line
):
    client.force_login(manager)
    one = total(client, ticket, **{qty(vase): "1"})
    assert one.status_code == 200
    assert "$24.00</strong>" in one.content.decode()
    assert "$55.49 left to refund of the $79.49 paid" in one.content.decode()
    more = total(
        client, ticket, **{qty(vase): "1", qty(runner_line): "1", "part_1047_shipping": "1"}
    )
    assert "$55.49</strong>" in more.content.decode()  # 24.00 + 24.50 + 6.99
    assert "$24.00 left" in more.content.decode()
    less = total(client, ticket, **{qty(vase): "1", f"part_1047_amount_{vase.pk}": "10.00"})
    assert "$10.00</strong>" in less.content.decode()


def test_the_whole_order_comes_to_what_was_paid(client, manager, ticket, vase):
    client.force_login(manager)
    whole = total(client, ticket, **{qty(vase): "0", "part_1047_whole": "1"})
    assert whole.status_code == 200
    assert "$79.49</strong>" in whole.content.decode()
    assert "$0.00 left to refund of the $79.49 paid" in whole.content.decode()


def refused(vase: OrderLine) -> list[tuple[dict[str, str], str]]:
    return [
        ({qty(vase): "3"}, "only 2 of the 2 x Ceramic vase are left to refund"),
        ({qty(vase): "1", f"part_1047_amount_{vase.pk}": "24.01"}, "at most $24.00"),
        ({qty(vase): "0"}, "tick what to refund, or reject it"),
        ({qty(vase): "two"}, "the quantity of Ceramic vase is a whole number"),
        ({qty(vase): "²"}, "the quantity of Ceramic vase is a whole number"),  # not int()'s words
        ({qty(vase): "1", f"part_1047_amount_{vase.pk}": "ten"}, "is not an amount"),
        ({qty(vase): "0", f"part_1047_amount_{vase.pk}": "5"}, "give how many Ceramic vase"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_parts_the_decision_refuses_are_a_400_in_the_decisions_words(
    client, manager, ticket, vase, case
):
    client.force_login(manager)
    fields, words = refused(vase)[case]
    answer = total(client, ticket, **fields)
    assert answer.status_code == 400
    assert words in answer.content.decode()
    assert 'role="alert"' in answer.content.decode()
    # The decision, given the same form, refuses it in the same words and records nothing.
    posted = client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {"interrupt_id": ticket.pending_interrupt_id, "approve": "1", "parts-1047": "1"}
        | {k.replace("_", "-"): v for k, v in fields.items()},
        headers={"HX-Request": "true"},
    )
    assert posted.status_code == 400 and words in posted.content.decode()
    assert not Decision.objects.exists()


def test_units_refunded_before_and_what_was_paid_are_the_limits(client, manager, ticket, vase):
    # The review's facts as the check read them: one vase refunded by an earlier ticket, and a
    # shop that took $30.00 for the order.
    payload = ticket.pending_payload
    facts = payload["orders"][0]["order"]
    facts["lines"][0] |= {"refunded_quantity": 1, "refunded_cents": 2400}
    facts |= {"refunded_cents": 2400, "paid_cents": 3000}
    Ticket.objects.filter(pk=ticket.pk).update(pending_payload=payload)
    client.force_login(manager)
    over_line = total(client, ticket, **{qty(vase): "2"})
    assert over_line.status_code == 400
    assert "only 1 of the 2 x Ceramic vase are left to refund" in over_line.content.decode()
    over_paid = total(client, ticket, **{qty(vase): "1", "part_1047_shipping": "1"})
    assert over_paid.status_code == 400
    said = over_paid.content.decode()
    assert "$6.00 is left of the $30.00 the customer paid; these parts come to $30.99" in said
    shipping = total(client, ticket, **{qty(vase): "0", "part_1047_shipping": "1"})
    assert shipping.status_code == 400  # the shipping alone ($6.99) is over the $6.00 left


def test_a_review_no_longer_pending_has_no_total(client, manager, ticket, vase):
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.REFUNDED)
    client.force_login(manager)
    answer = total(client, ticket, **{qty(vase): "1"})
    assert answer.status_code == 409
    assert "no longer pending" in answer.content.decode()


def test_a_ticket_the_user_may_not_read_has_no_total(client, colleague, ticket, vase):
    client.force_login(colleague)  # an agent: this review waits on a manager
    assert total(client, ticket, **{qty(vase): "1"}).status_code == 404


def test_each_order_of_a_ticket_of_several_has_its_own_total(client, manager, agent, order, vase):
    lamp = give_lines(make_order("1048", fee_cents=500, name="Iris Vale"), [("Desk lamp", 3900, 1)])
    opened = services.ticket_open(
        order_numbers=["1047", "1048"],
        opened_by=agent,
        reason=policy.DAMAGED,
        note="Customer: the vase and the lamp arrived smashed",
    )
    assert runner.advance(opened.pk) == "awaiting_review"
    ticket = Ticket.objects.get(pk=opened.pk)
    client.force_login(manager)
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert f'id="ticket-decide-{ticket.pk}-1048-total"' in page
    line = lamp.lines.get()
    url = reverse("reviews:parts_total", args=[ticket.pk])
    fields = {"parts-1048": "1", f"part-1048-qty-{line.pk}": "1", "part-1048-shipping": "1"}
    lamp_total = client.get(url, fields, headers={"HX-Request": "true"})
    assert lamp_total.status_code == 200
    assert "$44.00</strong>" in lamp_total.content.decode()  # 39.00 + 5.00
    both = client.get(url, fields | {"parts-1047": "1", f"part-1047-qty-{vase.pk}": "1"})
    assert both.status_code == 400
    assert "Send the parts of one open order" in both.content.decode()
