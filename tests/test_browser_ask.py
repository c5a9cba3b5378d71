"""A manager asks the customer for a photo on the ticket page and decides on the reply, which
comes through the inbound webhook with two photos shown on the card and the ticket page, in a
real browser at 390 and 1280 px. The test runs the thread itself between the clicks (no worker).
Screenshots under var/test/screenshots/ask-*.png for a person to look at."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from django.test import Client
from PIL import Image

from intake.models import Attachment
from refunds import enqueue, runner, services
from refunds.models import CannedReason, CustomerQuestion, Decision, Ticket
from tests.conftest import wait_for
from tests.test_attachments import post, reply_email
from tests.test_attachments import webhook as webhook  # noqa: F401 (a fixture)
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser]


@pytest.fixture(autouse=True)
def no_worker(settings, monkeypatch):
    settings.REFUNDS_UNDO_SECONDS = 0
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)


def png(red: int, green: int, blue: int) -> bytes:
    """A real 8x8 PNG of one colour, as a phone's photo would be a real image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + bytes((red, green, blue)) * 8 for _ in range(8))
    header = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


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

    # The reply comes through the mail provider's inbound webhook with two photos, and a
    # picture of too many pixels to draw: a link that downloads, which fits the page too.
    question = CustomerQuestion.objects.get(ticket=ticket)
    huge = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(huge, "PNG")
    files = [
        ("front.png", "image/png", png(200, 40, 40)),
        ("side.png", "image/png", png(40, 90, 200)),
        ("the-whole-room-from-the-doorway-panorama.png", "image/png", huge.getvalue()),
    ]
    reply = reply_email(question, files, sender=big_order.customer_email)
    assert post(Client(), reply).status_code == 200
    assert Attachment.objects.count() == 3
    assert runner.advance(ticket.pk) == "awaiting_review"
    page.goto(f"{live_server.url}/")
    card = page.locator(f"#review-{ticket.pk}")
    expect(card).to_contain_text("the vase is in pieces")
    photos = card.locator("img.thumb")
    expect(photos).to_have_count(2)
    for i in range(2):  # drawn, through the checked link
        photos.nth(i).scroll_into_view_if_needed()
        expect(photos.nth(i)).to_be_visible()
        wait_for(lambda i=i: photos.nth(i).evaluate("e => e.complete && e.naturalWidth") == 8)
    fits(page, "queue-reply")
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    expect(page.locator(".review-card .description")).to_contain_text("The customer replied:")
    expect(page.locator("img.thumb")).to_have_count(2)
    expect(page.locator(".attachments").first).to_contain_text("too large or unreadable to preview")
    fits(page, "reply")
    page.get_by_role("button", name="Approve the amount above").click()
    wait_for(lambda: Decision.objects.filter(ticket=ticket, answer="approve").exists())
    assert runner.advance(ticket.pk) == "refunded"
    assert Ticket.objects.get(pk=ticket.pk).status == "refunded"
    assert csp_problems(page, page.console_messages_seen) == []
