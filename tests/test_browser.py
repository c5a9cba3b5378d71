"""One ticket end to end in a real browser: Debian's chromium, the live server, a real worker."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connections

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
# Installed before any page script (through DevTools, so the page's own CSP does not apply to
# it): every Content-Security-Policy violation the page causes is kept for the test to read.
WATCH_CSP = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${where}`);
});
"""


def csp_problems(page, console: list[str]) -> list[str]:
    found = list(page.evaluate("window.__cspViolations || []"))
    return found + [m for m in console if "Content Security Policy" in m or "Refused to" in m]


@contextmanager
def playwright_session(monkeypatch) -> Iterator:
    """Sync Playwright for one test; the database connections the test opened while it ran are
    closed when it ends.

    Sync Playwright runs an asyncio event loop in this thread (the ORM calls between browser
    steps are allowed by DJANGO_ALLOW_ASYNC_UNSAFE), and while a loop runs, Django keeps this
    thread's connections apart from its plain ones (asgiref's thread-critical Local becomes
    context-local): the test's ORM calls open a second connection of the main thread, which
    pytest-django never closes and which stays in the thread's context for the next browser
    test. A blip test in between terminates every session but the plain one, and every later
    browser test met that dead connection at its first query (in `_persona`: "terminating
    connection due to administrator command", then "the connection is closed").
    tests/test_blip_isolation.py holds this."""
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        try:
            yield pw
        finally:
            connections.close_all()  # the loop still runs: the connections opened under it


@pytest.fixture
def browser_page(monkeypatch) -> Iterator:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    with playwright_session(monkeypatch) as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            page.add_init_script(WATCH_CSP)
            page.console_messages_seen = []  # type: ignore[attr-defined]
            page.on("console", lambda m: page.console_messages_seen.append(m.text))
            yield page
        finally:
            browser.close()


def test_an_agent_opens_approves_and_sees_a_refund_without_reloading(
    browser_page, live_server, workers, agent, colleague, late_order
):
    from playwright.sync_api import expect

    from refunds import services
    from tests.conftest import make_order

    expect.set_options(timeout=WAIT_MS)  # expect() has its own 5 s default
    page = browser_page
    worker = workers("w1")
    make_order("1044", fee_cents=350, name="Bo Kim")
    # A colleague's ticket: the agent decides it (four-eyes keeps them off their own).
    services.ticket_open(order_number="1044", opened_by=colleague)
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
    mine = Ticket.objects.get(order__number="1042")
    ticket = Ticket.objects.get(order__number="1044")

    # The worker runs the graph to the review; the queue's poll brings the colleague's row in,
    # and the agent's own ticket waits for someone else (its recent-tickets poll says so).
    row = page.locator(f"#review-{ticket.pk}")
    expect(row).to_contain_text("$3.50")
    expect(row).to_contain_text("Bo Kim")
    expect(page.locator(f"#recent-tickets [data-ticket='{mine.pk}']")).to_have_text(
        "Awaiting review"
    )
    assert page.locator(f"#review-{mine.pk}").count() == 0
    row.get_by_role("button", name="Approve").click()
    expect(page.locator("#messages")).to_contain_text("for order 1044 — being paid out")
    assert page.evaluate("window.sameDocument") is True

    # The worker applies the decision; the ticket page's poll shows the outcome.
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    status = page.locator("#ticket-status")
    expect(status.locator("#ticket-status-pill")).to_have_text("Refunded")
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert ticket.charges.count() == 1 and ticket.decisions.get().reviewer == agent
    expect(status).to_contain_text("Approved by agent")
    expect(status).to_contain_text("Settled the charges → Emailed the confirmation")
    # Every page above ran under the strict CSP (no inline script or style) without a violation.
    assert "unsafe-inline" not in (page.evaluate("document.contentType") or "")
    assert csp_problems(page, page.console_messages_seen) == []


def test_the_dashboard_and_the_api_docs_under_the_csp_at_phone_and_desk_widths(
    browser_page, live_server, manager, late_order
):
    """Screenshots for a person to look at (var/test/screenshots/), and no CSP violation."""
    from django.conf import settings
    from playwright.sync_api import expect

    _make_history(manager)
    shots = settings.DATA_DIR / "screenshots"
    shots.mkdir(exist_ok=True)
    page = browser_page
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("manager")
    page.get_by_label("Password").fill("pw")
    page.get_by_role("button", name="Log in").click()
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/dashboard/")
        expect(page.get_by_role("heading", name="How the desk is doing")).to_be_visible()
        assert page.locator("svg.chart").count() == 4
        # The charts fit the screen: nothing wider than the viewport.
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(shots / f"dashboard-{width}.png"), full_page=True)
        page.goto(f"{live_server.url}/api/docs/")
        expect(page.get_by_text("Refund Desk API").first).to_be_visible()
        expect(page.get_by_text("/api/tickets/{ticket_id}/").first).to_be_visible()
        page.screenshot(path=str(shots / f"api-docs-{width}.png"), full_page=True)
    assert csp_problems(page, page.console_messages_seen) == []


def _make_history(manager) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from refunds.models import Charge, Decision
    from tests.conftest import make_order
    from tests.reviewing import awaiting_review

    now = timezone.now()
    for day in range(12):
        order = make_order(f"80{day:02d}", fee_cents=400 + (day * 337) % 2600)
        status = ["refunded", "refunded", "declined", "refunded", "rejected"][day % 5]
        ticket = Ticket.objects.create(thread_id=f"b{day}", order=order, status=status)
        when = now - timedelta(days=day, hours=day % 3)
        Ticket.objects.filter(pk=ticket.pk).update(
            created_at=when - timedelta(minutes=20 + 7 * day), updated_at=when
        )
        if status != "declined":
            decision = Decision.objects.create(
                ticket=ticket,
                interrupt_id=f"b{day}",
                reviewer=manager,
                answer="approve" if status == "refunded" else "reject",
            )
            Decision.objects.filter(pk=decision.pk).update(decided_at=when - timedelta(minutes=2))
        if status == "refunded":
            Charge.objects.create(
                ticket=ticket,
                order=order,
                idempotency_key=f"b{day}",
                amount_cents=order.shipping_fee_cents,
                status="succeeded",
                receipt=f"rb{day}",
                settled_at=when,
            )
    for n in range(3):
        awaiting_review(make_order(f"81{n}", fee_cents=900 + 2000 * n))


@pytest.mark.parametrize("cents", [15_000, 150_000])  # axes up to "$200.00" and "$2,000.00"
def test_the_dashboards_money_axis_is_drawn_inside_its_chart(
    browser_page, live_server, manager, cents
):
    from django.conf import settings
    from django.utils import timezone
    from playwright.sync_api import expect

    from refunds.models import Charge
    from tests.conftest import make_order

    order = make_order("8300", fee_cents=cents)
    ticket = Ticket.objects.create(thread_id="axis", order=order, status="refunded")
    Charge.objects.create(
        ticket=ticket,
        order=order,
        idempotency_key="axis",
        amount_cents=cents,
        status="succeeded",
        receipt="raxis",
        settled_at=timezone.now(),
    )
    page = browser_page
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("manager")
    page.get_by_label("Password").fill("pw")
    page.get_by_role("button", name="Log in").click()
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/dashboard/")
        paid = page.locator("figure", has_text="Refunds paid per day").locator("svg.chart")
        expect(paid).to_contain_text("$200.00" if cents == 15_000 else "$2,000.00")
        # Every label's drawn box, in the SVG's own units, against its viewBox.
        outside = page.evaluate(
            """() => [...document.querySelectorAll('svg.chart')].flatMap(svg => {
                const box = svg.viewBox.baseVal;
                return [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBBox()])
                  .filter(([, b]) => b.x < box.x || b.x + b.width > box.x + box.width
                                     || b.y < box.y || b.y + b.height > box.y + box.height)
                  .map(([text, b]) => `${text} at x=${b.x.toFixed(1)} w=${b.width.toFixed(1)}`);
            })"""
        )
        assert outside == []
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        shots = settings.DATA_DIR / "screenshots"
        shots.mkdir(exist_ok=True)
        paid.screenshot(path=str(shots / f"dashboard-axis-{cents}-{width}.png"))
