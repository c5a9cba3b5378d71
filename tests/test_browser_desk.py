"""The review desk in a real browser (Debian's chromium, the live server): keyboard, a lower
amount, two reviewers racing for one review, a phone-sized queue; screenshots of every desk page
at 390 and 1280 px under var/test/screenshots/ for a person to look at."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import Client

from refunds import services
from refunds.models import Decision, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review
from tests.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    WATCH_CSP,
    csp_problems,
    playwright_session,
)

pytestmark = [pytest.mark.browser]
WAIT_MS = 10_000


@pytest.fixture
def browser(monkeypatch) -> Iterator:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    with playwright_session(monkeypatch) as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


def page_for(browser, live_server, user, *, width: int = 1280):
    """A browser context logged in as `user` (its session cookie made by Django's test client)."""
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.add_init_script(WATCH_CSP)
    page.console_messages_seen = []  # type: ignore[attr-defined]
    page.on("console", lambda m: page.console_messages_seen.append(m.text))
    # Every request a page makes by itself (its icon, styles, scripts) is answered.
    page.failed_requests = []  # type: ignore[attr-defined]
    page.on(
        "response",
        lambda r: r.status >= 400 and page.failed_requests.append(f"{r.status} {r.url}"),
    )
    return page


def shots():
    folder = settings.DATA_DIR / "screenshots"
    folder.mkdir(exist_ok=True)
    return folder


def test_an_agent_claims_and_approves_with_the_keyboard(browser, live_server, agent):
    from playwright.sync_api import expect

    ticket = awaiting_review(make_order("1042"))
    awaiting_review(make_order("1044", fee_cents=350, name="Bo Kim"))
    page = page_for(browser, live_server, agent)
    page.goto(f"{live_server.url}/")
    expect(page).to_have_title("(2) Review queue · Refund Desk")
    expect(page.locator("#keys")).to_contain_text("assign to me")
    row = page.locator(f"#review-{ticket.pk}")
    page.keyboard.press("j")
    expect(row).to_have_class("review current")
    page.keyboard.press("c")
    expect(row).to_contain_text("Yours until")
    page.keyboard.press("a")
    expect(page.locator("#messages")).to_contain_text("for order 1042 — being paid out")
    decision = Decision.objects.get(ticket=ticket)
    assert (decision.reviewer, decision.answer) == (agent, "approve")
    assert csp_problems(page, page.console_messages_seen) == []


def test_a_manager_lowers_an_amount_and_approves(browser, live_server, manager, big_order):
    from playwright.sync_api import expect

    ticket = awaiting_review(big_order)
    page = page_for(browser, live_server, manager)
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    page.get_by_label("Amount to refund").fill("30.00")
    page.get_by_role("button", name="Approve the amount above").click()
    expect(page.locator("#messages")).to_contain_text(
        "Approved $30.00 (instead of $48.00) for order 1045 — being paid out"
    )
    expect(page.locator("#ticket-status")).to_contain_text(
        "manager lowered the amount from $48.00 to $30.00 and approved it."
    )
    (one,) = Decision.objects.get(ticket=ticket).orders.values()
    assert one["amount_cents"] == 3000
    assert csp_problems(page, page.console_messages_seen) == []


def test_two_reviewers_race_for_one_review_and_one_is_told_it_is_taken(
    browser, live_server, agent, colleague
):
    from playwright.sync_api import expect

    ticket = awaiting_review(make_order("1042"))
    pages = [page_for(browser, live_server, user) for user in (agent, colleague)]
    for page in pages:
        page.goto(f"{live_server.url}/")
    buttons = [p.locator(f"#review-{ticket.pk} button[name=claim]") for p in pages]
    for button in buttons:
        expect(button).to_be_visible()
    for button in buttons:
        button.click(no_wait_after=True)  # both clicks sent before either answer is back
    for page in pages:
        expect(page.locator(f"#review-{ticket.pk}")).not_to_contain_text("Assign to me")
    winner = Ticket.objects.get(pk=ticket.pk).claimed_by
    texts = [p.locator(f"#review-{ticket.pk}").inner_text() for p in pages]
    taken = [t for t in texts if "Already taken" in t or "Being looked at" in t]
    assert len(taken) == 1, texts
    assert winner.username in taken[0]
    assert sum("Yours until" in t for t in texts) == 1, texts


def test_every_desk_page_fits_a_phone_and_a_desk_and_the_queue_buttons_are_on_screen(
    browser, live_server, agent, manager, colleague
):
    from playwright.sync_api import expect

    small = awaiting_review(make_order("1042"), opened_by=colleague)
    flagged = awaiting_review(make_order("1090", fee_cents=15000, name="Flo Rida"))
    flagged.pending_payload["flags"] = ["Shipping fee $150.00 is unusually high."]
    Ticket.objects.filter(pk=flagged.pk).update(pending_payload=flagged.pending_payload)
    awaiting_review(make_order("1045", fee_cents=4800, name="Dev Patel"))
    Ticket.objects.create(
        thread_id="done-1", order=make_order("1001"), status="refunded", amount_cents=699
    )
    # A shift under way: the agent holds one review, a colleague another, a third went up.
    services.review_claim(ticket=small, by=agent)
    held = awaiting_review(make_order("1051", fee_cents=899, name="Gus Roy"))
    services.review_claim(ticket=held, by=colleague)
    up = awaiting_review(make_order("1050", fee_cents=1200, name="Eve Ng"))
    services.ticket_escalate(ticket=up, by=colleague, note="Customer disputes the delivery date.")
    folder = shots()
    for width in (390, 1280):
        for user in (agent, manager):
            page = page_for(browser, live_server, user, width=width)
            page.goto(f"{live_server.url}/")
            mine = small if user == agent else flagged
            approve = page.locator(f"#review-{mine.pk} button[name=approve]")
            expect(approve).to_be_visible()
            box = approve.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, box
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.screenshot(path=str(folder / f"queue-{user.username}-{width}.png"), full_page=True)
            page.goto(f"{live_server.url}/tickets/{flagged.pk if user == manager else small.pk}/")
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.screenshot(
                path=str(folder / f"ticket-{user.username}-{width}.png"), full_page=True
            )
            page.goto(f"{live_server.url}/tickets/")
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.screenshot(
                path=str(folder / f"tickets-{user.username}-{width}.png"), full_page=True
            )
            if user == manager:
                page.goto(f"{live_server.url}/audit/")
                assert page.evaluate("document.documentElement.scrollWidth") <= width
                page.screenshot(path=str(folder / f"audit-{width}.png"), full_page=True)
                page.goto(f"{live_server.url}/admin/login/")  # Django admin's own page
                expect(page.locator("#login-form")).to_be_visible()
            assert csp_problems(page, page.console_messages_seen) == []
            assert page.failed_requests == []
            page.context.close()
