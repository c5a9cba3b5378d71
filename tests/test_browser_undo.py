"""Undo beside a decision's confirmation in a real browser (Debian's chromium, the live server)
at 390 and 1280 px: `a` in the queue approves, "Undo" stands beside the decided line while the
grace runs, and a click brings the review back; bulk approve's results carry it too. No worker
runs: within the grace there is nothing for one to do. Screenshots under
var/test/screenshots/undo-*.png for a person to look at."""

from __future__ import annotations

import pytest

from refunds import enqueue
from refunds.models import AuditEvent, Decision
from tests.conftest import make_order
from tests.reviewing import awaiting_review
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser]


@pytest.fixture(autouse=True)
def grace(settings, monkeypatch):
    settings.REFUNDS_UNDO_SECONDS = 60  # long enough for the clicks below, whatever the load
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)
    monkeypatch.setattr(enqueue, "wake_after", lambda ticket_id, seconds: True)


def fits(page, name: str) -> None:
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width, name
        page.screenshot(path=str(shots() / f"undo-{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_a_then_undo_brings_the_review_back(browser, live_server, agent):  # noqa: F811
    from playwright.sync_api import expect

    ticket = awaiting_review(make_order("1042"))
    page = page_for(browser, live_server, agent)
    page.goto(f"{live_server.url}/")
    row = page.locator(f"#review-{ticket.pk}")
    page.keyboard.press("j")
    page.keyboard.press("a")
    expect(row).to_contain_text("for order 1042 — paid out in")
    expect(row).to_contain_text("seconds unless you undo it")
    undo = row.get_by_role("button", name="Undo")
    expect(undo).to_be_visible()
    fits(page, "decided")
    undo.click()
    expect(page.locator("#messages")).to_contain_text(
        "Undone: the review of order 1042 is back in the queue."
    )
    expect(row.get_by_role("button", name="Approve")).to_be_visible()
    fits(page, "undone")
    assert not Decision.objects.exists()
    assert AuditEvent.objects.filter(ticket=ticket, action="undo", actor=agent).exists()
    assert csp_problems(page, page.console_messages_seen) == []


def test_bulk_approve_results_carry_undo(browser, live_server, agent):  # noqa: F811
    from playwright.sync_api import expect

    first = awaiting_review(make_order("1042"))
    second = awaiting_review(make_order("1044", fee_cents=350, name="Bo Kim"))
    page = page_for(browser, live_server, agent)
    page.goto(f"{live_server.url}/")
    for ticket in (first, second):
        page.locator(f"#review-{ticket.pk} input[type=checkbox]").check()
    page.get_by_role("button", name="Approve the ticked reviews").click()
    results = page.locator("#bulk-results")
    expect(results).to_contain_text("Bulk approve: 2 reviews")
    expect(results.get_by_role("button", name="Undo")).to_have_count(2)
    fits(page, "bulk")
    results.locator(f"li[data-ticket='{second.pk}']").get_by_role("button", name="Undo").click()
    expect(page.locator("#messages")).to_contain_text("Undone: the review of order 1044")
    assert list(Decision.objects.values_list("ticket_id", flat=True)) == [first.pk]
