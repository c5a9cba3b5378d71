"""A refund Stripe has not finished, on the ticket page in a real browser: the status says it is
on its way, and the page fits a phone (390 px) and a desk (1280 px); screenshots under
var/test/screenshots/ for a person to look at."""

from __future__ import annotations

import pytest

from refunds.models import Charge, Ticket
from tests.conftest import make_order
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser]


@pytest.mark.parametrize("width", [390, 1280])
def test_a_refund_on_its_way_reads_so_on_a_phone_and_a_desk(
    browser,  # noqa: F811
    live_server,
    agent,
    width,
):
    from playwright.sync_api import expect

    order = make_order("1042", fee_cents=1250)
    ticket = Ticket.objects.create(
        thread_id="refund-1042-way", order=order, status="refunded", amount_cents=1250
    )
    Charge.objects.create(
        ticket=ticket,
        order=order,
        idempotency_key="refund-1042-way:charge_card:1042:1250",
        amount_cents=1250,
        status="succeeded",
        receipt="re_way",
        processor_status="pending",
    )
    page = page_for(browser, live_server, agent, width=width)

    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")

    expect(page.locator("#ticket-status-pill")).to_have_text(
        "Refund of $12.50 started, on its way to the customer's bank"
    )
    expect(page.locator(".processor-status")).to_have_text(
        "Refund of $12.50 started, on its way to the customer's bank"
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(shots() / f"ticket-on-its-way-{width}.png"), full_page=True)

    page.goto(f"{live_server.url}/tickets/")
    expect(page.locator(f".status[data-ticket='{ticket.pk}']")).to_have_text(
        "Refund of $12.50 started, on its way to the customer's bank"
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(shots() / f"tickets-on-its-way-{width}.png"), full_page=True)
    assert csp_problems(page, page.console_messages_seen) == []
