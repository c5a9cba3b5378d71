"""The desk's side of the intake in a real browser (Debian's chromium, the live server, a real
worker): an agent sorts a message from "Needs sorting" into a ticket, and the review card shows
what was read, by whom, with the customer's words. Screenshots at 390 and 1280 px under
var/test/screenshots/intake-*.png for a person to look at."""

from __future__ import annotations

import pytest

from intake.models import Message
from refunds import enqueue, policy, services, tasks
from refunds.models import CannedReason, Ticket
from tests.conftest import make_order
from tests.sorting_messages import a_reading, waiting_message
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]
WAIT_MS = 30_000  # a worker start, a graph run and a 2 s poll


def both_widths(page, name: str) -> None:
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width, name
        page.screenshot(path=str(shots() / f"intake-{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_an_agent_sorts_a_message_into_a_ticket_from_needs_sorting(
    browser,  # noqa: F811
    live_server,
    agent,
    late_order,
    monkeypatch,
    smtp,
):
    from playwright.sync_api import expect

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # no worker in this one
    sent: list[int] = []  # the outbox rows handed to a worker; the test runs its task itself
    monkeypatch.setattr(enqueue, "send", lambda task, row_id: sent.append(row_id) or True)
    CannedReason.objects.get_or_create(  # as migration 0030 seeds it
        title="Not about a refund",
        defaults={
            "use": CannedReason.Use.SET_ASIDE,
            "text": "Thank you for your message. It does not ask for a refund, so we have not "
            "opened a refund request.",
        },
    )
    make_order("1044", fee_cents=1250)  # Ana's other order, offered beside the one read
    make_order("2001", name="Ben Okafor")
    message = waiting_message(
        subject="Re: Fwd: your order",
        body=(
            "Hello,\n\nthe mug in my parcel arrived in pieces, the box was crushed. "
            "It was order #1042 (my neighbour Ben's order 2001 came fine).\n\n"
            "Can I get my money back?\n\nAna\n\n> On Mon, Refund Desk wrote:\n> "
            + "Thanks for your order. "
            * 40
        ),
        reading=a_reading(orders=("1042", "2001"), read_by="rules"),
        sorting_reason="several customers' orders",
    )
    question = waiting_message(
        subject="Do you ship to Canada?",
        body="Hi! Quick question before I order: do you ship to Canada?",
        reading=a_reading(policy.NOT_REFUND, ())
        | {"summary": "Asks whether we ship to Canada.", "quotes": {"reason": "do you ship"}},
        sorting_reason="not about a refund",
    )
    page = page_for(browser, live_server, agent)
    page.goto(f"{live_server.url}/")
    expect(page.locator("#nav-needs-sorting")).to_contain_text("Needs sorting 2")
    page.locator("#nav-needs-sorting").click()
    expect(page.get_by_role("heading", name="Needs sorting")).to_be_visible()
    card = page.locator(f"#message-{message.pk}")
    expect(card).to_contain_text("several customers' orders")
    expect(card).to_contain_text("Read by rules")
    expect(card).to_contain_text("another customer's: ben@example.com")
    both_widths(page, "needs-sorting")

    page.evaluate("window.sameDocument = true")
    expect(card.get_by_label("2001")).not_to_be_checked()  # another customer's: never ticked
    card.get_by_label("Reason").select_option("damaged")
    card.get_by_role("button", name="Open the ticket").click()
    expect(card).to_contain_text("Opened ticket")
    ticket = Ticket.objects.get()
    assert (ticket.order.number, ticket.reason) == ("1042", policy.DAMAGED)
    assert Message.objects.get(pk=message.pk).status == Message.Status.OPENED
    expect(page.locator("#nav-needs-sorting")).to_contain_text("Needs sorting 1")
    expect(page.locator("#needs-sorting-total")).to_have_text("1 message to sort.")
    assert page.evaluate("window.sameDocument") is True  # htmx, no reload
    both_widths(page, "sorted")

    # Not a refund request: the customer is answered (a canned reply and a word of one's own),
    # the message is set aside, listed, and the setting aside is undone.
    other = page.locator(f"#message-{question.pk}")
    other.get_by_text("Not a refund request…").click()
    other.get_by_label("A reply").select_option(label="Not about a refund")
    other.get_by_label("Or your own words").fill("Yes, we ship to Canada.")
    both_widths(page, "set-aside-form")
    other.get_by_role("button", name="Set aside as not a refund request").click()
    expect(other).to_contain_text("the reply goes to them now")
    expect(page.locator("#nav-needs-sorting")).to_have_text("Needs sorting")
    both_widths(page, "set-aside-done")
    (email_id,) = sent
    assert tasks.resend_email(email_id) is True  # the worker's task, run here
    (mail,) = smtp.delivered
    body = mail.body.replace("\r\n", "\n")
    assert mail.subject == "Re: Do you ship to Canada?" and mail.to == ["ana@example.com"]
    assert "It does not ask for a refund" in body and "Yes, we ship to Canada." in body

    page.goto(f"{live_server.url}/messages/set-aside/")
    row = page.locator(f"#message-{question.pk}")
    expect(row).to_contain_text("Set aside by agent")
    expect(row).to_contain_text("replied with “Not about a refund”")
    both_widths(page, "set-aside-list")
    row.get_by_role("link", name="Do you ship to Canada?").click()
    expect(page.locator("#message-status")).to_contain_text(
        "Set aside as not a refund request by agent at"
    )
    expect(page.locator("#message-status")).to_contain_text("(sent)")
    both_widths(page, "set-aside-message")
    page.get_by_role("button", name="Undo: back to Needs sorting").click()
    expect(page.locator("body")).to_contain_text("is back in Needs sorting")
    expect(page.locator("#message-status")).to_contain_text("it stays sent")
    expect(page.locator("#nav-needs-sorting")).to_contain_text("Needs sorting 1")
    both_widths(page, "set-aside-undone")
    assert Message.objects.get(pk=question.pk).status == Message.Status.NEEDS_SORTING
    assert len(smtp.delivered) == 1  # the undo sent nothing more
    assert csp_problems(page, page.console_messages_seen) == []


def test_the_review_card_shows_what_was_read_and_the_message_goes_back_when_misread(
    browser,  # noqa: F811
    live_server,
    workers,
    manager,
    late_order,
):
    from playwright.sync_api import expect

    worker = workers("w1")
    reading = a_reading(
        policy.WRONG_ITEM,
        read_by="anthropic:claude-sonnet-4-5",
        amount_cents=699,
    ) | {
        "summary": "Ana got a blue mug instead of the red one she ordered.",
        "quotes": {"reason": "you sent me a blue one", "orders": "order 1042"},
    }
    ticket = services.ticket_open(order_number="1042", reason=policy.WRONG_ITEM, reading=reading)
    Message.objects.filter(pk=waiting_message(status=Message.Status.OPENED).pk).update(
        ticket=ticket
    )
    page = page_for(browser, live_server, manager)
    page.set_default_timeout(WAIT_MS)
    expect.set_options(timeout=WAIT_MS)
    try:
        page.goto(f"{live_server.url}/")
        row = page.locator(f"#review-{ticket.pk}")
        expect(row).to_contain_text("Read by anthropic:claude-sonnet-4-5")
        expect(row).to_contain_text("you sent me a blue one")
        expect(row).to_contain_text("Wrong item")
        both_widths(page, "review-card")

        page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
        status = page.locator("#ticket-status")
        expect(status).to_contain_text("What was read from the customer's message")
        expect(status).to_contain_text("Ana got a blue mug instead of the red one")
        page.locator("#ticket-status details.body-fold summary").first.click()
        expect(status).to_contain_text("It was order #1042")
        page.locator(f"#send-back-{ticket.pk} summary").click()
        page.get_by_label("What was misread").fill("She asks about a gift card, not a refund.")
        both_widths(page, "ticket")
        page.get_by_role("button", name="Send back to Needs sorting").click()
        expect(page.locator("#messages")).to_contain_text("back to Needs sorting")
        expect(status.locator("#ticket-status-pill")).to_have_text("Rejected by reviewer")
        assert not ticket.charges.exists()
        expect(page.locator("#nav-needs-sorting")).to_contain_text("Needs sorting")
        page.goto(f"{live_server.url}/messages/needs-sorting/")
        expect(page.locator(".message").first).to_contain_text(
            "Sent back by manager: She asks about a gift card, not a refund."
        )
        both_widths(page, "sent-back")
    except AssertionError as exc:
        tickets = list(Ticket.objects.values("pk", "status", "last_error", "attempts"))
        raise AssertionError(
            f"{exc}\ntickets: {tickets}\nworker log:\n{worker.output()[-4000:]}"
        ) from exc
    assert csp_problems(page, page.console_messages_seen) == []
