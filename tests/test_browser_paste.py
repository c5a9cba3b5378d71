"""A pasted customer message in a real browser, at 390 and 1280 px: the form takes it, the message's
page follows it while it is read, then links the ticket it opened. Screenshots under
var/test/screenshots/ for a person to look at."""

from __future__ import annotations

import pytest
from django.conf import settings

from intake import workflow
from intake.models import Message
from refunds import enqueue
from tests.conftest import make_order
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser]


@pytest.mark.parametrize("width", [390, 1280])
def test_a_pasted_message_is_followed_to_its_ticket(
    browser,  # noqa: F811
    live_server,
    agent,
    transactional_db,
    monkeypatch,
    width,
):
    from playwright.sync_api import expect

    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)  # the test runs the intake
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)
    make_order("1042")
    shots = settings.DATA_DIR / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    page = page_for(browser, live_server, agent, width=width)
    page.goto(f"{live_server.url}/tickets/new/")
    page.fill("#id_sender", "ana@example.com")
    page.fill("#id_message", "Hi, my order #1042 came a week late. Can I have the delivery back?")
    page.screenshot(path=str(shots / f"paste-form-{width}.png"), full_page=True)
    page.click("#ticket-form button[type=submit]")
    expect(page.locator("#message-status")).to_contain_text("Being read")
    message = Message.objects.get()
    assert workflow.message_take(message.pk) == "finished"
    expect(page.locator("#message-status")).to_contain_text("for order 1042")
    page.screenshot(path=str(shots / f"paste-message-{width}.png"), full_page=True)
    page.click("#message-status a")
    message.refresh_from_db()
    expect(page).to_have_url(f"{live_server.url}/tickets/{message.ticket_id}/")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert csp_problems(page, page.console_messages_seen) == []
