"""One decision shape, as a shift lives it in a real browser (Debian's chromium, the live
server), at 390 and 1280 px: an agent approves a proposal with lines from the ticket page as it
stands; a manager answers a ticket of three orders on its queue card (one approved, one
rejected with its reason, one paid less with its own reason), and the customer's email, read at
a real SMTP server, says each order's own truth. Screenshots under var/screens/."""

from __future__ import annotations

from pathlib import Path

import pytest

from refunds import enqueue, runner, services
from refunds.models import Decision, Ticket
from tests.conftest import give_lines, make_order
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for  # noqa: F401  (the fixture)
from tests.test_browser_shift import _fits

pytestmark = [pytest.mark.browser]
SCREENS = Path(__file__).resolve().parent.parent / "var" / "screens"


def review(ticket: Ticket) -> Ticket:
    assert runner.advance(ticket.pk) == "awaiting_review"
    return Ticket.objects.get(pk=ticket.pk)


@pytest.mark.parametrize("width", [390, 1280])
def test_an_agent_approves_from_the_ticket_page_and_a_manager_answers_three_orders_truly(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    manager,
    smtp,
    width,
    monkeypatch,
):
    from playwright.sync_api import expect

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    SCREENS.mkdir(parents=True, exist_ok=True)

    # An agent, the ticket page of an order with lines: "Approve what is ticked" as proposed.
    give_lines(make_order("1054", fee_cents=699), [("Ceramic vase", 2400, 1)])
    mine = review(services.ticket_open(order_number="1054", opened_by=colleague))
    page = page_for(browser, live_server, agent, width=width)
    page.goto(f"{live_server.url}/tickets/{mine.pk}/")
    approve = page.locator(f"#ticket-decide-{mine.pk} button[name=approve]")
    expect(approve).to_have_text("Approve what is ticked")
    approve.click()
    expect(page.locator("body")).to_contain_text("Approved $6.99 for order 1054")
    assert Decision.objects.get(ticket=mine).reviewer == agent
    page.screenshot(path=str(SCREENS / f"decisions-agent-ticket-{width}.png"), full_page=True)
    assert runner.advance(mine.pk) == "refunded"

    # A manager, the queue card of three orders of one customer ($29.99 together).
    for number, fee in (("1092", 899), ("1093", 1450), ("1094", 650)):
        make_order(number, fee_cents=fee, name="Tomas Lind")
    three = review(services.ticket_open(order_numbers=["1092", "1093", "1094"]))
    page = page_for(browser, live_server, manager, width=width)
    page.goto(f"{live_server.url}/")
    row = page.locator(f"#review-{three.pk}")
    row.locator("details.order-lines-box > summary").click()
    row.locator(f"#decide-{three.pk}-answer-1093").select_option("reject")
    row.locator(f"#decide-{three.pk}-reason-1093").fill("It arrived during a carrier strike.")
    row.locator(f"#decide-{three.pk}-amount-1094").fill("5.00")
    row.locator(f"#decide-{three.pk}-reason-1094").fill("Part of the fee was discounted.")
    _fits(page, width)
    page.screenshot(path=str(SCREENS / f"decisions-three-card-{width}.png"), full_page=True)
    row.locator("button[name=orders]").click()
    expect(page.locator(f"#review-{three.pk}")).to_contain_text(
        "Approved $13.99 (instead of $15.49) for orders 1092, 1094, rejected 1093"
    )
    assert runner.advance(three.pk) == "refunded"

    told = [m for m in smtp.delivered if m.key.startswith(three.thread_id)]
    assert len(told) == 1  # the customer is told once
    body = " ".join(told[0].body.split())
    assert "Order 1092: $8.99" in body
    assert "Order 1094: $5.00 of the $6.50 asked" in body
    assert "because: Part of the fee was discounted." in body
    assert "Order 1093: It arrived during a carrier strike." in body
    assert "because: It arrived during a carrier strike" not in body  # never another's reason
    assert "In total: $13.99 of the $29.99 you asked for." in body
    assert csp_problems(page, page.console_messages_seen) == []
