"""A customer's email sent in Spanish, on the ticket page in a real browser: the desk reads what
was sent in English, told the language, and the page fits a phone (390 px) and a desk (1280 px);
screenshots under var/test/screenshots/ for a person to look at."""

from __future__ import annotations

import pytest
from django.utils import timezone

from refunds import emails
from refunds.models import Email, Ticket
from tests.conftest import make_order
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser]


@pytest.mark.parametrize("width", [390, 1280])
def test_an_email_sent_in_spanish_reads_in_english_on_the_ticket(
    browser,  # noqa: F811
    live_server,
    agent,
    width,
):
    from playwright.sync_api import expect

    order = make_order("1042", fee_cents=1450)
    ticket = Ticket.objects.create(
        thread_id="refund-1042-es", order=order, status="refunded", amount_cents=1000
    )
    facts = {
        "customer_name": "Ana Souza",
        "orders": ["1042"],
        "refunded": [
            {
                "number": "1042",
                "asked_cents": 1450,
                "paid_cents": 1000,
                "receipt": "re_es",
                "part": True,
                "why_part": "Half of the parcel came on time.",
            },
        ],
        "not_refunded": [],
        "asked_cents": 1450,
        "paid_cents": 1000,
        "part": True,
        "why": {"late_by_days": 3},
    }
    worded = emails.word("refunded", facts, "es")
    Email.objects.create(
        ticket=ticket,
        key="refund-1042-es:email",
        to=order.customer_email,
        subject=worded.subject,
        body=worded.body,
        language=worded.language,
        desk_text=worded.desk_text,
        status="sent",
        sent_at=timezone.now(),
    )
    page = page_for(browser, live_server, agent, width=width)

    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")

    words = page.locator("details.email-words")
    expect(words.locator("summary")).to_have_text("Sent in Spanish; what it says in English")
    words.locator("summary").click()
    expect(words).to_contain_text(
        "We have started a refund of $10.00 of the $14.50 you asked for in shipping"
    )
    expect(words).to_contain_text("Why not all of it: Half of the parcel came on time.")
    expect(page.get_by_text("“Su reembolso del pedido 1042”")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    words.scroll_into_view_if_needed()
    page.screenshot(path=str(shots() / f"ticket-email-in-spanish-{width}.png"), full_page=True)
    assert csp_problems(page, page.console_messages_seen) == []
