"""The history page of a forked ticket in a real browser (Debian's chromium): the old branch and
the new one are both visible, at phone and desk widths, under the strict CSP."""

from __future__ import annotations

import pytest

from refunds import enqueue, runner, services
from refunds.models import Ticket
from tests import test_browser
from tests.reviewing import advance_to_review, decide
from tests.test_browser import csp_problems

browser_page = test_browser.browser_page  # the fixture: Debian's chromium, the CSP watched

pytestmark = [pytest.mark.browser]


def forked_ticket(agent, admin_user) -> Ticket:
    ticket = services.ticket_open(order_number="1042", opened_by=agent, note="arrived late")
    ticket = advance_to_review(ticket)
    decide(ticket, admin_user, "reject", "the fee on the order looks wrong")
    assert runner.advance(ticket.pk) == "rejected"
    ticket.refresh_from_db()
    services.ticket_fork(
        ticket=ticket, amount_cents=500, reason="the customer paid $5.00", by=admin_user
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    return Ticket.objects.get(pk=ticket.pk)


def test_the_history_of_a_forked_ticket_shows_its_branches(
    browser_page, live_server, agent, admin_user, late_order, monkeypatch
):
    from django.conf import settings
    from playwright.sync_api import expect

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    ticket = forked_ticket(agent, admin_user)
    shots = settings.DATA_DIR / "screenshots"
    shots.mkdir(exist_ok=True)
    page = browser_page
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("pw")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("link", name="Failed")).to_be_visible()
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/tickets/{ticket.pk}/history/")
        expect(page.get_by_role("heading", name=f"History of ticket {ticket.pk}")).to_be_visible()
        expect(page.locator("#branch-count")).to_contain_text("2 (branch 2 is current")
        old = page.locator("li.checkpoint.old-branch").first
        expect(old).to_be_visible()
        expect(old.locator(".branch-badge")).to_have_text("Branch 1 · replaced")
        expect(page.locator("li.checkpoint.head .branch-badge")).to_have_text("Branch 2 · current")
        expect(page.get_by_text("Branches off step").first).to_be_visible()
        expect(page.locator("svg.flow .node.current")).to_have_count(1)
        page.screenshot(path=str(shots / f"history-{width}.png"), full_page=True)
        wide = page.evaluate(
            "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right"
            f" > {width}).slice(0, 5).map(e => e.tagName + '.' + e.className)"
        )
        assert page.evaluate("document.documentElement.scrollWidth") <= width, wide
    # Fork again from the newest checkpoint: previewed first, in words and with its charge key.
    page.locator("li.checkpoint.head").get_by_role("link", name="Fork from here…").click()
    page.get_by_label("Corrected refund amount").fill("$4")
    page.get_by_label("Why").fill("the customer asked for $4.00 only")
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#fork-preview")).to_contain_text(
        f"{ticket.thread_id}:charge_card:1042:400"
    )
    page.screenshot(path=str(shots / "fork-preview-1280.png"), full_page=True)
    page.get_by_role("button", name="Apply the fork").click()
    expect(page.locator("#messages")).to_contain_text("with $4.00")
    assert csp_problems(page, page.console_messages_seen) == []


def test_the_history_of_a_ticket_of_several_orders_shows_one_lane_per_order(
    browser_page, live_server, agent, admin_user, late_order, monkeypatch
):
    """Three orders, one declined by policy, two refunded: a lane per order on top, readable
    at phone and desk widths (nothing wider than the screen), under the strict CSP."""
    from pathlib import Path

    from playwright.sync_api import expect

    from tests.conftest import make_order

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    make_order("1044")
    make_order("1047", late=0)
    ticket = advance_to_review(services.ticket_open(order_numbers=["1042", "1044", "1047"]))
    decide(ticket, admin_user, "approve", "late, both")
    assert runner.advance(ticket.pk) == "refunded"
    shots = Path(__file__).resolve().parent.parent / "var" / "screens"
    shots.mkdir(parents=True, exist_ok=True)
    page = browser_page
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("pw")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("link", name="Failed")).to_be_visible()
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/tickets/{ticket.pk}/history/")
        expect(page.get_by_role("heading", name="orders 1042, 1044, 1047")).to_be_visible()
        lanes = page.locator("#order-lanes li.lane")
        expect(lanes).to_have_count(3)
        expect(page.locator("#lane-1042")).to_contain_text("charged $6.99, receipt")
        expect(page.locator("#lane-1047")).to_contain_text("declined by policy")
        for number in ("1042", "1044", "1047"):  # each lane's words on screen, none cut
            box = page.locator(f"#lane-{number}").bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
        page.screenshot(path=str(shots / f"history-several-{width}.png"), full_page=False)
        page.locator("#order-lanes").screenshot(path=str(shots / f"lanes-{width}.png"))
        wide = page.evaluate(
            "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right"
            f" > {width}).slice(0, 5).map(e => e.tagName + '.' + e.className)"
        )
        assert page.evaluate("document.documentElement.scrollWidth") <= width, wide
    assert csp_problems(page, page.console_messages_seen) == []
