"""A ticket of three orders in a real browser (Debian's chromium, the live server), at 390 and
1280 px: the queue card shows each order, nothing of it is cut off, the manager answers per order
on the page (a lower amount for one, a rejection with a reason for another), and the ticket page
shows the end. Screenshots under var/screens/ for a person to look at."""

from __future__ import annotations

from pathlib import Path

import pytest

from refunds import enqueue, runner, services
from refunds.models import Charge, Decision, Email
from refunds.payments.demo import DemoProcessorRefund
from tests.conftest import make_order
from tests.reviewing import shipped
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for  # noqa: F401  (the fixture)
from tests.test_browser_shift import _fits
from tests.test_desk_several import several

pytestmark = [pytest.mark.browser]
SCREENS = Path(__file__).resolve().parent.parent / "var" / "screens"


def _on_screen(locator, width: int) -> None:
    box = locator.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, box


def _table_fits(page) -> None:
    """The queue's table ends inside its section (not under the aside beside it)."""
    over = page.evaluate(
        "(() => { const t = document.querySelector('table.queue');"
        " return t.getBoundingClientRect().right - t.parentElement.getBoundingClientRect().right"
        " })()"
    )
    assert over <= 1, f"the queue's table runs {over:.0f} px past its section"


@pytest.mark.parametrize("width", [390, 1280])
def test_a_manager_answers_a_three_order_ticket_per_order_on_the_queue_card(
    browser,  # noqa: F811
    live_server,
    manager,
    width,
    monkeypatch,
):
    from playwright.sync_api import expect

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    SCREENS.mkdir(parents=True, exist_ok=True)
    # A review of one order first, as on a real shift: its row's buttons want a wide decision
    # column, the three orders' lines a wide notes column, and the table must still fit beside
    # the page's aside.
    make_order("1045", late=6, fee_cents=4800, name="Dev Patel")
    assert runner.advance(services.ticket_open(order_number="1045").pk) == "awaiting_review"
    # 1042 late, 1043 on time (declined by policy), 1049 $150.00 (flagged): a manager's review.
    ticket = several(("1042", 4, 699), ("1043", -1, 499), ("1049", 5, 15000))
    page = page_for(browser, live_server, manager, width=width)
    page.goto(f"{live_server.url}/")
    _table_fits(page)
    row = page.locator(f"#review-{ticket.pk}")
    expect(row.locator("li.order-line")).to_have_count(3)
    expect(row.locator('li[data-order="1043"]')).to_contain_text("Declined by policy")
    expect(row.locator('li[data-order="1049"]')).to_contain_text("unusually high")
    expect(row).to_contain_text("Total $156.99 on 2 of 3 orders")
    for control in (
        row.locator(f"#decide-{ticket.pk}-answer-1042"),
        row.locator(f"#decide-{ticket.pk}-answer-1049"),
        row.locator(f"#decide-{ticket.pk}-amount-1049"),
        row.locator("button[name=approve]"),
        row.locator("button[name=orders]"),
    ):
        expect(control).to_be_visible()
        _on_screen(control, width)
    _fits(page, width)
    if width > 700:  # the row stays in its column: nothing under the aside, beside or below it
        row_box, aside = row.bounding_box(), page.locator("aside").bounding_box()
        assert row_box and aside, (row_box, aside)
        beside = row_box["x"] + row_box["width"] <= aside["x"]
        assert beside or aside["y"] >= row_box["y"] + row_box["height"], (row_box, aside)
    page.screenshot(path=str(SCREENS / f"several-queue-{width}.png"), full_page=True)
    # The ticket page's review card: the same lines and answers, its own form.
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    card = page.locator(".review-card")
    expect(card.locator("li.order-line")).to_have_count(3)
    for control in (
        card.locator(f"#ticket-decide-{ticket.pk}-answer-1049"),
        card.locator(f"#ticket-decide-{ticket.pk}-amount-1042"),
        card.locator("button[name=orders]"),
        card.locator("button[name=approve]"),
    ):
        expect(control).to_be_visible()
        _on_screen(control, width)
    _fits(page, width)
    page.screenshot(path=str(SCREENS / f"several-ticket-review-{width}.png"), full_page=True)
    page.goto(f"{live_server.url}/")
    row = page.locator(f"#review-{ticket.pk}")

    row.locator(f"#decide-{ticket.pk}-amount-1042").fill("5.00")
    row.locator(f"#decide-{ticket.pk}-answer-1049").select_option("reject")
    # Saved without a reason: refused, said on the card, nothing recorded.
    row.locator("button[name=orders]").click()
    expect(page.locator(f"#review-{ticket.pk} .error")).to_contain_text(
        "Give a reason for rejecting order 1049"
    )
    assert not Decision.objects.exists()
    row = page.locator(f"#review-{ticket.pk}")
    # The answers stay as given (the row came back with them); the reason box is open.
    expect(row.locator(f"#decide-{ticket.pk}-answer-1049")).to_have_value("reject")
    expect(row.locator(f"#decide-{ticket.pk}-amount-1042")).to_have_value("5.00")
    row.locator(f"#reason-{ticket.pk}").fill("A fee this high needs the carrier's report.")
    _fits(page, width)
    page.screenshot(path=str(SCREENS / f"several-queue-answering-{width}.png"), full_page=True)
    row.locator("button[name=orders]").click()
    expect(page.locator(f"#review-{ticket.pk}")).to_contain_text(
        "Approved $5.00 (instead of $6.99) for order 1042, rejected 1049"
    )
    decision = Decision.objects.get()
    assert decision.orders == {
        "1042": shipped(500),
        "1049": {"answer": "reject", "reason": "A fee this high needs the carrier's report."},
    }

    assert runner.advance(ticket.pk) == "refunded"
    assert list(Charge.objects.values_list("order__number", "amount_cents")) == [("1042", 500)]
    assert DemoProcessorRefund.objects.count() == 1 and Email.objects.count() == 1
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    expect(page.locator("h1")).to_contain_text("orders 1042, 1043, 1049")
    expect(page.locator("#ticket-orders li")).to_have_count(3)
    expect(page.locator("ol.timeline")).to_contain_text(
        "manager answered per order: approved $5.00 on 1042 (lowered from $6.99); rejected 1049"
    )
    _fits(page, width)
    page.screenshot(path=str(SCREENS / f"several-ticket-{width}.png"), full_page=True)
    page.goto(f"{live_server.url}/tickets/")
    expect(page.get_by_text(f"#{ticket.pk} · orders 1042, 1043, 1049")).to_be_visible()
    _fits(page, width)
    page.screenshot(path=str(SCREENS / f"several-tickets-{width}.png"), full_page=True)
    assert csp_problems(page, page.console_messages_seen) == []
    page.context.close()
