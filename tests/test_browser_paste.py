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
    # Four-eyes: whoever pasted it opened the ticket, and the page says so.
    expect(page.locator("#ticket-opener")).to_contain_text("agent from a pasted message")
    page.screenshot(path=str(shots / f"paste-ticket-{width}.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert csp_problems(page, page.console_messages_seen) == []


@pytest.mark.slow
def test_a_pasted_message_becomes_a_ticket_whose_review_card_shows_the_reading_and_is_refunded(
    browser,  # noqa: F811
    live_server,
    workers,
    sinks,
    agent,
    colleague,
    late_order,
):
    """As a new user: an agent pastes a customer's email, a real worker reads it and opens the
    ticket, a colleague sees on the review card what was read and by whom, approves, and the
    refund and the mail land where they land: one refund at the processor, one acknowledgment
    and one confirmation at the SMTP server."""
    from playwright.sync_api import expect

    from devtools.processes import wait_for
    from refunds.models import Ticket

    worker = workers("w1")
    shots = settings.DATA_DIR / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    page = page_for(browser, live_server, agent)
    expect.set_options(timeout=30_000)
    try:
        page.goto(f"{live_server.url}/tickets/new/")
        page.fill("#id_sender", "ana@example.com")
        page.fill(
            "#id_message",
            "hi, my last order came almost a week late, can I get the delivery charge back? "
            "it was #1042, thanks, Ana",
        )
        page.click("#ticket-form button[type=submit]")
        expect(page.locator("#message-status")).to_contain_text("for order 1042")
        message = Message.objects.get()
        ticket = Ticket.objects.get()
        assert (message.ticket_id, ticket.reason, ticket.reading["read_by"]) == (
            ticket.pk,
            "late_delivery",
            "classifier",
        )

        reviewer = page_for(browser, live_server, colleague)
        reviewer.goto(f"{live_server.url}/")
        row = reviewer.locator(f"#review-{ticket.pk}")
        expect(row).to_contain_text("Read by classifier")
        expect(row).to_contain_text("Late delivery")
        expect(row).to_contain_text("late")  # the customer's own word, quoted
        for width in (390, 1280):
            reviewer.set_viewport_size({"width": width, "height": 900})
            assert reviewer.evaluate("document.documentElement.scrollWidth") <= width
            reviewer.screenshot(path=str(shots / f"paste-review-card-{width}.png"), full_page=True)
        row.get_by_role("button", name="Approve $6.99").click()
        expect(reviewer.locator("#messages")).to_contain_text("Approved")
        wait_for(
            lambda: Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.REFUNDED,
            what="the ticket refunded",
        )
        wait_for(lambda: sinks.smtp.count() >= 2, what="the acknowledgment and the confirmation")
    except AssertionError as exc:
        tickets = list(Ticket.objects.values("pk", "status", "last_error"))
        raise AssertionError(
            f"{exc}\ntickets: {tickets}\nworker:\n{worker.output()[-4000:]}"
        ) from exc
    assert [r["amount_cents"] for r in sinks.gateway.refunds_for(ticket.thread_id)] == [699]
    assert sorted(sinks.smtp.keys().values()) == [1, 1]
    assert csp_problems(page, page.console_messages_seen) == []
