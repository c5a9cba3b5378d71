"""What an order holds on the ticket page in a real browser (Debian's chromium, the live
server): the table of lines fits a phone (390 px) and a desk (1280 px) without a sideways
scroll; screenshots under var/test/screenshots/ for a person to look at."""

from __future__ import annotations

import pytest

from refunds.models import TicketOrder
from tests.conftest import give_lines, make_order
from tests.reviewing import awaiting_review
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser]


@pytest.mark.parametrize("width", [390, 1280])
def test_the_lines_table_fits_a_phone_and_a_desk(browser, live_server, agent, width):  # noqa: F811
    from playwright.sync_api import expect

    vase = give_lines(
        make_order("1046", fee_cents=899, name="Maya Lindqvist"),
        [
            ("Hand-thrown stoneware vase, large, sea-green glaze", 6400, 1),
            ("Linen table runner", 2450, 2),
        ],
    )
    charger = give_lines(
        make_order("1050", fee_cents=0, name="Maya Lindqvist"),
        [("Laptop 14-inch, 16 GB", 119900, 1), ("USB-C charger 65 W", 3999, 1)],
        tax_cents=320,
    )
    ticket = awaiting_review(vase)
    TicketOrder.objects.create(ticket=ticket, order=charger, position=1)
    page = page_for(browser, live_server, agent, width=width)

    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")

    table = page.locator('.bought[data-order="1046"] table')
    expect(table).to_contain_text("Hand-thrown stoneware vase")
    expect(page.locator('.bought[data-order="1050"] table')).to_contain_text("$1,199.00")
    page.screenshot(path=str(shots() / f"ticket-bought-{width}.png"), full_page=True)
    for number in ("1046", "1050"):
        box = page.locator(f'.bought[data-order="{number}"]')
        fits = box.evaluate("(el) => el.scrollWidth <= el.clientWidth")
        assert fits, f"the table of order {number} scrolls sideways at {width} px"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert csp_problems(page, page.console_messages_seen) == []
