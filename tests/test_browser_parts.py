"""A manager refunds one of two vases, with no return, on the ticket page in a real browser
(Debian's chromium, the live server, a Celery worker paying through localstripe): counted at
localstripe, one refund of the vase's price. Screenshots at 390 and 1280 px under
var/test/screenshots/ for a person to look at."""

from __future__ import annotations

import pytest

from refunds import policy, services
from refunds.models import OrderLine, Ticket
from tests.conftest import give_lines, make_order
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401  (browser: a fixture)
from tests.test_browser_shop import both_widths

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WAIT_MS = 60_000  # a worker start, a graph run to the review, then the charge and the email


def test_a_manager_refunds_one_of_two_vases_with_no_return(
    browser,  # noqa: F811
    live_server,
    workers,
    localstripe,
    agent,
    manager,
    settings,
):
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    settings.REFUNDS_FAKES_BANNER = []
    order = give_lines(
        make_order("1047", fee_cents=699, name="Iris Vale"), [("Ceramic vase", 2400, 2)]
    )
    order.payment_reference = localstripe.payment_intent(order.paid_cents)
    order.save()
    vase = OrderLine.objects.get(order=order)
    worker = workers("w1", env=localstripe.env())
    try:
        ticket = services.ticket_open(
            order_number="1047",
            opened_by=agent,
            reason=policy.DAMAGED,
            note="Customer: one of the two vases arrived smashed into pieces",
        )
        page = page_for(browser, live_server, manager)
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
        parts = page.locator('fieldset.parts[data-order="1047"]')
        while not parts.count():  # the worker's run reaches the review; the page says so
            page.wait_for_timeout(500)
            page.reload()
        expect(parts).to_contain_text("The customer reports Ceramic vase as damaged.")
        quantity = parts.get_by_label("How many Ceramic vase to refund")
        expect(quantity).to_have_value("2")  # the proposal: the line the customer names
        both_widths(page, "parts-proposed")
        quantity.fill("1")
        page.get_by_role("button", name="Approve what is ticked").click()
        expect(page.locator("#ticket-status-pill")).to_have_text("Refunded")
        both_widths(page, "parts-refunded")
    except AssertionError as exc:
        tickets = list(Ticket.objects.values("pk", "status", "last_error"))
        raise AssertionError(f"{exc}\n{tickets}\n{worker.output()[-4000:]}") from exc

    # Counted where the money lands: one refund, one vase, the shipping kept.
    [refund] = localstripe.refunds(order.payment_reference)
    assert refund["amount"] == 2400
    assert refund["metadata"]["parts"] == f"{vase.pk}x1"
    assert "restock" not in refund["metadata"]  # it stays with the customer
    assert csp_problems(page, page.console_messages_seen) == []
