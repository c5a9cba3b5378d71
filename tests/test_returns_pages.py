"""What people see of a refund on return and of an offer of store credit, in a real browser at a
phone's width and a desk's: the ticket waiting for the goods, the same ticket refunded for what
came back, and the customer's page choosing store credit (in their language)."""

from __future__ import annotations

import pytest

from refunds import enqueue, policy, runner, services
from refunds.models import CreditOffer, ReturnRequest
from tests.conftest import give_lines, make_order
from tests.reviewing import decide
from tests.test_browser_desk import WAIT_MS, WATCH_CSP, browser  # noqa: F401 (fixture)

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def no_broker(monkeypatch, settings):
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)  # the test runs the threads
    settings.REFUNDS_RETURN_REASONS = [policy.WRONG_ITEM]
    settings.REFUNDS_UNDO_SECONDS = 0


def fits(page, width: int) -> None:
    from tests.test_browser import csp_problems

    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert csp_problems(page, page.console_messages_seen) == []


@pytest.mark.parametrize("width", [390, 1280])
def test_a_ticket_waits_for_the_goods_then_shows_what_came_back(
    browser,  # noqa: F811
    live_server,
    colleague,
    manager,
    width,
):
    from tests.test_browser_desk import page_for, shots

    order = give_lines(
        make_order("2001", late=0, fee_cents=500),
        [("Linen shirt", 2000, 3), ("Silk scarf", 1500, 1)],
    )
    ticket = services.ticket_open(
        order_number="2001", opened_by=colleague, reason=policy.WRONG_ITEM, note="shirts, scarf"
    )
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    decide(ticket, manager)
    assert runner.advance(ticket.pk) == "awaiting_return"
    reference = ReturnRequest.objects.get(ticket=ticket).reference
    page = page_for(browser, live_server, manager, width=width)
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    assert page.get_by_text(reference).first.is_visible()
    page.screenshot(path=str(shots() / f"return-waiting-{width}.png"), full_page=True)
    fits(page, width)
    shirt = order.lines.get(title="Linen shirt").pk
    services.return_arrived(
        reference=reference,
        status="received",
        lines=[services.Back(quantity=2, line=shirt)],
        source="test",
    )
    assert runner.advance(ticket.pk) == "refunded"
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    assert page.get_by_text("Refunded", exact=True).first.is_visible()
    page.screenshot(path=str(shots() / f"return-refunded-{width}.png"), full_page=True)
    fits(page, width)


@pytest.mark.parametrize("width", [390, 1280])
def test_the_customer_chooses_store_credit_on_a_page_in_their_language(
    browser,  # noqa: F811
    live_server,
    colleague,
    manager,
    settings,
    width,
):
    from refunds.services import credit
    from tests.test_browser_desk import shots

    settings.REFUNDS_STORE_CREDIT = True
    settings.REFUNDS_CREDIT_BONUS_PERCENT = 10
    give_lines(make_order("3001", late=0, fee_cents=0), [("Wool jacket", 40000, 1)])
    ticket = services.ticket_open(
        order_number="3001",
        opened_by=colleague,
        reason=policy.DAMAGED,
        note="the jacket, la chaqueta",
        reading={"language": "es", "summary": "chaqueta dañada"},
    )
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    answers = services.review_answers(ticket, answer="approve")
    answers["3001"]["offer_credit"] = True
    services.ticket_decide(
        ticket=ticket, interrupt_id=ticket.pending_interrupt_id, reviewer=manager, orders=answers
    )
    assert runner.advance(ticket.pk) == "awaiting_customer"
    url = credit.link(CreditOffer.objects.get(ticket=ticket)).split("/credit/", 1)[1]
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()  # no login
    page.set_default_timeout(WAIT_MS)
    page.add_init_script(WATCH_CSP)
    page.console_messages_seen = []
    page.on("console", lambda m: page.console_messages_seen.append(m.text))
    page.goto(f"{live_server.url}/credit/{url}")
    choose = page.get_by_role("button", name="$440.00 en crédito en tienda")
    assert choose.is_visible()
    page.screenshot(path=str(shots() / f"credit-choice-{width}.png"), full_page=True)
    fits(page, width)
    choose.click()
    assert page.get_by_text("eligió crédito en tienda").is_visible()
    assert runner.advance(ticket.pk) == "refunded"
