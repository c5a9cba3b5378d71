"""One ticket end to end in a real browser: Debian's chromium, the live server, a real worker."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from refunds.models import Ticket

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT_MS = 30_000  # a worker start, a graph run and a 2 s poll, with room for a slow machine


@pytest.fixture
def browser_page(monkeypatch) -> Iterator:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    # Sync Playwright runs an event loop in this thread; the ORM calls the test makes between
    # browser steps are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            browser.close()


def test_an_agent_opens_approves_and_sees_a_refund_without_reloading(
    browser_page, live_server, workers, agent, late_order
):
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)  # expect() has its own 5 s default
    page = browser_page
    worker = workers("w1")
    try:
        _open_approve_and_watch(page, live_server, agent, expect)
    except AssertionError as exc:
        tickets = list(Ticket.objects.values("pk", "status", "last_error", "attempts"))
        raise AssertionError(
            f"{exc}\ntickets: {tickets}\nworker log:\n{worker.output()[-4000:]}"
        ) from exc


def _open_approve_and_watch(page, live_server, agent, expect) -> None:

    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(f"{live_server.url}/login/?next=/")
    page.get_by_label("Username").fill("agent")
    page.get_by_label("Password").fill("pw")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    page.evaluate("window.sameDocument = true")  # gone if anything below reloads the page

    page.get_by_label("Order number").fill("1042")
    page.get_by_label("What did the customer say?").fill("It arrived 4 days late")
    page.get_by_role("button", name="Open ticket").click()
    expect(page.locator("#ticket-form")).to_contain_text("for order 1042")
    ticket = Ticket.objects.get()

    # The worker runs the graph to the review; the queue's poll brings the row in.
    row = page.locator(f"#review-{ticket.pk}")
    expect(row).to_contain_text("$6.99")
    expect(row).to_contain_text("Ana Souza")
    row.get_by_role("button", name="Approve").click()
    expect(page.locator("#messages")).to_contain_text("Approved the refund on order 1042")

    # The worker applies the decision; the recent-tickets poll shows the outcome.
    expect(page.locator(f"#recent-tickets [data-ticket='{ticket.pk}']")).to_have_text("Refunded")
    assert page.evaluate("window.sameDocument") is True

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert ticket.charges.count() == 1 and ticket.decisions.get().reviewer == agent

    page.get_by_role("link", name=f"#{ticket.pk} · order 1042").click()
    status = page.locator("#ticket-status")
    expect(status.locator("#ticket-status-pill")).to_have_text("Refunded")
    expect(status).to_contain_text("Approved by agent")
    expect(status).to_contain_text("approve → charge_card → email")
