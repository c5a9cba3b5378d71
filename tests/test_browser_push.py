"""The queue's push in a real browser (Debian's chromium): with the events process up, the page
says push is live and shows a colleague's claim within about a second, not at its next poll."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.conf import settings

from refunds import services
from tests.conftest import make_order, wait_for
from tests.reviewing import awaiting_review
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser as browser  # the fixture
from tests.test_browser_desk import page_for
from tests.test_events import Server, events_process

pytestmark = [pytest.mark.browser, pytest.mark.slow]
# Installed before the page's scripts: each "queueChanged" the doorbell fires on <body>.
RINGS = """
window.rings = [];
window.polls = 0;
document.addEventListener("queueChanged", () => window.rings.push(Date.now()));
document.addEventListener("htmx:afterRequest", (e) => {
  if (e.detail.elt.id === "queue-foot") { window.polls++; }
});
"""
# The page's poll drops a ring that comes while a poll is in flight or within 500 ms of the last
# (queue.html: hx-sync "this:drop", throttle:500ms); with push live the next poll is then 30 s
# away. The test rings after both have passed: what it holds is the doorbell's second.
QUIET = """
window.polls > 0 && !document.querySelector("#queue-foot.htmx-request")
  && Date.now() - window.rings[window.rings.length - 1] > 600
"""


@pytest.fixture
def events(live_server, tmp_path, settings) -> Iterator[Server]:
    """The events process on its own port, as the demo runs it: the page (the live server's
    origin) reaches it with its session cookie (CORS) and the policy's connect-src names it."""
    server = events_process(tmp_path, REFUNDS_EVENTS_ORIGINS=live_server.url)
    host = live_server.url.rpartition(":")[0]  # a cookie's host has no port: the same session
    settings.REFUNDS_EVENTS_URL = f"{host}:{server.port}/queue/events/"
    policy = settings.CONTENT_SECURITY_POLICY
    directives = policy["DIRECTIVES"] | {"connect-src": ["'self'", f"{host}:{server.port}"]}
    settings.CONTENT_SECURITY_POLICY = policy | {"DIRECTIVES": directives}
    yield server
    server.stop()


def test_a_colleagues_claim_shows_within_a_second_with_push_on(
    browser, live_server, events, agent, colleague
):
    from playwright.sync_api import expect

    ticket = awaiting_review(make_order("1042"))
    page = page_for(browser, live_server, agent)
    page.add_init_script(RINGS)
    page.goto(f"{live_server.url}/")
    expect(page.locator("body")).to_have_attribute("data-push", "live")
    row = page.locator(f"#review-{ticket.pk}")
    expect(row).to_be_visible()

    wait_for(lambda: page.evaluate("window.rings.length"), what="the first (clock) ring")
    wait_for(lambda: page.evaluate(QUIET), timeout=10, what="its poll answered")
    rang = page.evaluate("window.rings.length")

    services.review_claim(ticket=ticket, by=colleague)
    claimed = time.monotonic()
    # The doorbell, not the fast poll (2 s; 30 s once it slowed down), brought it.
    wait_for(lambda: page.evaluate("window.rings.length") > rang, timeout=1.0, what="a ring")
    expect(row).to_contain_text("Being looked at by bea", timeout=3_000)
    assert time.monotonic() - claimed < 1.5
    assert csp_problems(page, page.console_messages_seen) == []
    assert page.failed_requests == []
    assert settings.REFUNDS_EVENTS_URL.endswith(f":{events.port}/queue/events/")
