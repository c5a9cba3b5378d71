"""A manager asks the customer for a photo on the ticket page and decides on the reply, in a real
browser at 390 and 1280 px. The test runs the thread itself between the clicks (no worker).
Screenshots under var/test/screenshots/ask-*.png for a person to look at."""

from __future__ import annotations

import pytest
from django.utils import timezone

from intake.services import message_receive
from refunds import enqueue, runner, services
from refunds.models import CannedReason, CustomerQuestion, Decision, Ticket
from tests.conftest import wait_for
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser]


@pytest.fixture(autouse=True)
def no_worker(settings, monkeypatch):
    settings.REFUNDS_UNDO_SECONDS = 0
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)


def fits(page, name: str) -> None:
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width, name
        page.screenshot(path=str(shots() / f"ask-{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_a_manager_asks_for_a_photo_and_decides_on_the_reply(
    browser,  # noqa: F811
    live_server,
    manager,
    agent,
    big_order,  # noqa: F811
):
    from playwright.sync_api import expect

    CannedReason.objects.create(
        title="Photo", text="Could you send a photo of the damage?", use="ask", position=1
    )
    ticket = services.ticket_open(order_number=big_order.number, opened_by=agent)
    assert runner.advance(ticket.pk) == "awaiting_review"
    page = page_for(browser, live_server, manager)
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    page.get_by_text("Ask the customer instead").click()
    page.get_by_label("A question").select_option(label="Could you send a photo of the damage?")
    fits(page, "asking")
    page.get_by_role("button", name="Ask the customer").click()
    expect(page.locator("#messages")).to_contain_text("Asked the customer about order 1045")
    assert runner.advance(ticket.pk) == "awaiting_customer"
    page.reload()
    expect(page.locator("#waiting-on-customer")).to_contain_text("Waiting on the customer since")
    fits(page, "waiting")

    question = CustomerQuestion.objects.get(ticket=ticket)
    body = "Here it is: the lamp's shade is cracked right across."
    message_receive(
        channel="email",
        key="<photo@customer.test>",
        message_id="<photo@customer.test>",
        sender=big_order.customer_email,
        subject="Re: your question",
        body=body,
        received_at=timezone.now(),
        raw=body,
        recipients=[f"replies+{question.token}@desk.example.com"],
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    page.goto(f"{live_server.url}/")
    expect(page.locator(f"#review-{ticket.pk}")).to_contain_text("cracked right across")
    fits(page, "queue-reply")
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    expect(page.locator(".review-card .description")).to_contain_text("The customer replied:")
    fits(page, "reply")
    page.get_by_role("button", name="Approve the amount above").click()
    wait_for(lambda: Decision.objects.filter(ticket=ticket, answer="approve").exists())
    assert runner.advance(ticket.pk) == "refunded"
    assert Ticket.objects.get(pk=ticket.pk).status == "refunded"
    assert csp_problems(page, page.console_messages_seen) == []
