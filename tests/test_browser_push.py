"""The queue's push in a real browser (Debian's chromium): with the events process up, the page
says push is live and shows a colleague's claim within about a second, not at its next poll."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.conf import settings

from refunds import services
from refunds.models import Ticket
from tests.conftest import make_order, wait_for
from tests.reviewing import awaiting_review
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser as browser  # the fixture
from tests.test_browser_desk import page_for
from tests.test_events import Server, events_process

pytestmark = [pytest.mark.browser, pytest.mark.slow]
# Installed before the page's scripts: each "queueChanged" the doorbell fires on <body>, and
# the ids of the cards each "cards" event named, once the page's own handler has had it.
RINGS = """
window.rings = [];
window.heard = [];
window.polls = 0;
document.addEventListener("queueChanged", () => window.rings.push(Date.now()));
document.addEventListener("htmx:afterRequest", (e) => {
  if (e.detail.elt.id === "queue-foot") { window.polls++; }
});
const Source = window.EventSource;
window.EventSource = function (url, options) {
  const source = new Source(url, options);
  source.addEventListener("cards", (e) => setTimeout(() => {
    window.heard.push(...JSON.parse(e.data).cards.map((card) => card[0]));
  }));
  return source;
};
"""
# static/push.js rings at most once every 2 s (a ring within 2 s of the last waits for that), up
# to 400 ms after the event; with push live the next poll is then 30 s away. A test rings after
# that has passed: what it holds is the doorbell's second.
QUIET = """
window.polls > 0 && !document.querySelector("#queue-foot.htmx-request")
  && Date.now() - window.rings[window.rings.length - 1] > 2100
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


def test_a_full_first_page_lets_pass_the_rings_of_cards_it_cannot_show(
    browser, live_server, events, manager
):
    """A manager's first page of 25, the longest waiting, with more after it: a review that
    comes now (it waits less than all shown) rings no poll; one that has waited longer does."""
    from playwright.sync_api import expect

    waiting = [awaiting_review(make_order(f"20{n:02}", fee_cents=4800)) for n in range(26)]
    page = page_for(browser, live_server, manager)
    page.add_init_script(RINGS)
    page.goto(f"{live_server.url}/")
    expect(page.locator("body")).to_have_attribute("data-push", "live")
    expect(page.locator("#queue-rows [data-card]")).to_have_count(25)
    assert not page.locator(f"#review-{waiting[-1].pk}").count()
    wait_for(lambda: page.evaluate("window.rings.length"), what="the first (clock) ring")
    wait_for(lambda: page.evaluate(QUIET), timeout=10, what="its poll answered")
    rang = page.evaluate("window.rings.length")

    later = awaiting_review(make_order("2090", fee_cents=4800))
    wait_for(lambda: later.pk in page.evaluate("window.heard"), timeout=5, what="its event")
    assert page.evaluate("window.rings.length") == rang
    assert page.evaluate("document.body.dataset.ring") is None  # and none is on its way

    longer = awaiting_review(make_order("2091", fee_cents=4800))
    Ticket.objects.filter(pk=longer.pk).update(review_since=waiting[0].review_since)
    wait_for(lambda: page.evaluate("window.rings.length") > rang, timeout=3, what="a ring")
    expect(page.locator(f"#review-{longer.pk}")).to_be_visible(timeout=5_000)
    expect(page.locator("#queue-rows [data-card]")).to_have_count(25)
