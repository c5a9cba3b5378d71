"""Plugged into a real shop, in a real browser: an admin imports the shop's orders with
`manage.py import_orders` (a real process), an agent opens a ticket for one of them on the desk,
a second agent approves it (four-eyes), a real worker refunds it through StripeGateway, and the
refund is counted at localstripe: one, the shipping fee only. Screenshots at 390 and 1280 px
under var/test/screenshots/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from refunds.models import Order, Ticket
from tests.conftest import database_url
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401  (browser: a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WAIT_MS = 60_000  # a worker start, a graph run to the review, then the charge and the email
PAID = 5699  # what the customer paid at the shop: goods and the $6.99 shipping fee
ROOT = Path(__file__).resolve().parent.parent


def import_orders(path: Path) -> subprocess.CompletedProcess[str]:
    """The admin's command, as a process of its own on the test database."""
    return subprocess.run(
        [sys.executable, "manage.py", "import_orders", str(path), "--no-progress"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url()},
        capture_output=True,
        text=True,
        timeout=120,
    )


def both_widths(page, name: str) -> None:
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width, name
        page.screenshot(path=str(shots() / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_imported_orders_are_opened_approved_and_refunded_at_stripe(
    browser,  # noqa: F811
    live_server,
    workers,
    localstripe,
    admin_user,
    agent,
    colleague,
    tmp_path,
    settings,
):
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    # No fake in play: the worker pays through Stripe and mails through SMTP, so the pages carry
    # no staging banner (the test process's own settings allow fakes for other tests).
    settings.REFUNDS_FAKES_BANNER = []
    paid = localstripe.payment_intent(PAID)
    shop_file = tmp_path / "orders.csv"
    shop_file.write_text(
        "order_number,customer_name,customer_email,currency,shipping_fee,promised_on,"
        "delivered_on,payment_reference\n"
        f"7101,Iris Vale,iris@example.com,USD,6.99,2026-11-02,2026-11-06,{paid}\n"
        f"7102,Jon Park,jon@example.com,USD,4.50,2026-11-02,2026-11-02,{paid}\n",
        encoding="utf-8",
    )

    imported = import_orders(shop_file)
    assert imported.returncode == 0, imported.stderr
    assert "2 created, 0 updated, 0 unchanged" in imported.stdout, imported.stdout
    order = Order.objects.get(number="7101")
    assert (order.shipping_fee_cents, order.payment_reference) == (699, paid)

    admin = page_for(browser, live_server, admin_user)
    admin.goto(f"{live_server.url}/admin/refunds/order/")
    expect(admin.locator("#result_list")).to_contain_text("Iris Vale")
    expect(admin.locator("#result_list")).to_contain_text("$6.99")
    both_widths(admin, "shop-imported-orders")

    worker = workers("w1", env=localstripe.env())
    try:
        _open_approve_and_count(browser, live_server, agent, colleague, localstripe, paid, expect)
    except AssertionError as exc:
        tickets = list(Ticket.objects.values("pk", "status", "last_error", "attempts"))
        raise AssertionError(
            f"{exc}\ntickets: {tickets}\nworker log:\n{worker.output()[-4000:]}"
        ) from exc


def _open_approve_and_count(browser, live_server, agent, second, localstripe, paid, expect):  # noqa: F811
    """The agent opens, the second agent approves, the worker pays; counted at localstripe."""
    opener = page_for(browser, live_server, agent)
    opener.set_default_timeout(WAIT_MS)
    opener.goto(f"{live_server.url}/")
    opener.get_by_label("Order number").fill("7101")
    opener.get_by_label("What did the customer say?").fill("My parcel came four days late")
    opener.get_by_role("button", name="Open ticket").click()
    expect(opener.locator("#ticket-form")).to_contain_text("for order 7101")
    ticket = Ticket.objects.get(order__number="7101")
    # Four-eyes: the opener waits for someone else; their queue never offers it.
    expect(opener.locator(f"#recent-tickets [data-ticket='{ticket.pk}']")).to_have_text(
        "Awaiting review"
    )
    assert opener.locator(f"#review-{ticket.pk}").count() == 0
    both_widths(opener, "shop-opened")

    reviewer = page_for(browser, live_server, second)
    reviewer.set_default_timeout(WAIT_MS)
    reviewer.goto(f"{live_server.url}/")
    row = reviewer.locator(f"#review-{ticket.pk}")
    expect(row).to_contain_text("$6.99")
    expect(row).to_contain_text("Iris Vale")
    both_widths(reviewer, "shop-review")
    row.get_by_role("button", name="Approve").click()
    expect(reviewer.locator("#messages")).to_contain_text("for order 7101 — being paid out")

    reviewer.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    expect(reviewer.locator("#ticket-status-pill")).to_have_text("Refunded")
    expect(reviewer.locator("#ticket-status")).to_contain_text("Approved by bea")
    both_widths(reviewer, "shop-refunded")

    # Counted where the money lands: one refund on that PaymentIntent, the fee and not the
    # $56.99 paid, carrying our charge key.
    [refund] = localstripe.refunds(paid)
    assert refund["amount"] == 699
    assert (
        refund["metadata"]["refund_desk_key"]
        == f"{ticket.thread_id}:charge_card:{ticket.order.number}:699"
    )
    ticket.refresh_from_db()
    assert ticket.charges.get().receipt == refund["id"]
    for page in (opener, reviewer):
        assert csp_problems(page, page.console_messages_seen) == []
