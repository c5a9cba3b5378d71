"""The queue's poll in a real browser: two reviewers see each other's claims and decisions at
their next poll, only the changed card is drawn again, and the poll's pace (2 s, slower while
nothing changes, none while the tab is hidden, at once after an action) on the page's own clock
(Playwright's fake timers: no test waits out real seconds)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from refunds.models import Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser]

# Counts the queue's polls and the cards each changed poll draws, in the page itself.
COUNT_POLLS = """
window.__polls = 0; window.__drawn = [];
document.addEventListener("htmx:beforeRequest", function (e) {
  if (e.detail.elt.id === "queue-foot") { window.__polls += 1; }
});
document.addEventListener("htmx:oobBeforeSwap", function (e) {
  if (e.detail.target && e.detail.target.id) { window.__drawn.push(e.detail.target.id); }
});
"""


def _poll_after(page, action):
    """Do `action`, then wait for this page's next poll that starts after it; its answer."""
    action()
    with page.expect_response(lambda r: "clock=" in r.url, timeout=40_000) as poll:
        pass
    return poll.value


@pytest.mark.parametrize("width", [390, 1280])
def test_two_reviewers_see_each_others_claims_and_decisions_at_their_next_poll(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    manager,
    width,
):
    from playwright.sync_api import expect

    first, second, third = (
        awaiting_review(make_order(str(1300 + n), fee_cents=500 + n), opened_by=manager)
        for n in range(3)
    )
    ana = page_for(browser, live_server, agent, width=width)
    bea = page_for(browser, live_server, colleague, width=width)
    for page in (ana, bea):
        page.add_init_script(COUNT_POLLS)
        page.goto(f"{live_server.url}/")
        expect(page.locator(f"#review-{third.pk}")).to_be_visible()

    # Ana takes the second review: Bea's next poll shows it is Ana's, and draws that card only.
    claim = ana.locator(f"#review-{second.pk} button[name=claim]")
    bea.evaluate("window.__drawn = []")
    answer = _poll_after(bea, lambda: (claim.click(), expect(claim).to_be_hidden()))
    assert answer.status == 200
    held = bea.locator(f"#review-{second.pk}")
    expect(held).to_contain_text("Being looked at by agent", timeout=1_000)
    assert bea.evaluate("window.__drawn") == [f"review-{second.pk}"]
    bea.screenshot(path=str(shots() / f"queue-poll-colleagues-claim-{width}.png"))

    # Bea approves the first: Ana's next poll shows the decision waiting for a worker.
    approve = bea.locator(f"#review-{first.pk} button[name=approve]")
    _poll_after(ana, lambda: (approve.click(), expect(approve).to_be_hidden()))
    decided = ana.locator(f"#review-{first.pk}")
    expect(decided).to_contain_text("Approved by bea", timeout=1_000)
    expect(decided.locator("button[name=approve]")).to_have_count(0)
    # The card Ana holds is still hers, drawn where it was.
    expect(ana.locator(f"#review-{second.pk}")).to_contain_text("Yours until")
    ids = ana.locator("#queue-rows > tr").evaluate_all("rows => rows.map(r => r.id)")
    assert ids == [f"review-{first.pk}", f"review-{second.pk}", f"review-{third.pk}"]
    ana.screenshot(path=str(shots() / f"queue-poll-colleagues-decision-{width}.png"))

    # A worker takes the decided review out of the queue: it leaves both pages; the title counts.
    Ticket.objects.filter(pk=first.pk).update(status=Ticket.Status.RUNNING)
    for page in (ana, bea):
        expect(page.locator(f"#review-{first.pk}")).to_have_count(0, timeout=40_000)
        expect(page).to_have_title("(2) Review queue · Refund Desk")
    for page in (ana, bea):
        assert csp_problems(page, page.console_messages_seen) == []
        assert page.failed_requests == []


def test_the_poll_slows_while_nothing_changes_stops_while_hidden_and_hurries_after_an_action(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    manager,
):
    from playwright.sync_api import expect

    ticket = awaiting_review(make_order("1310"), opened_by=manager)
    page = page_for(browser, live_server, agent)
    start = timezone.now()
    page.clock.install(time=start)
    page.clock.pause_at(start + timedelta(milliseconds=100))  # time moves only when told
    page.add_init_script(COUNT_POLLS)
    page.goto(f"{live_server.url}/")
    page.clock.run_for(10)  # the page's own first timers
    expect(page.locator(f"#review-{ticket.pk}")).to_be_visible()

    def polls() -> int:
        return page.evaluate("window.__polls")

    def run(ms: int, *, polled: bool) -> None:
        """Move the page's clock; a poll it starts is answered before the next move."""
        before = polls()
        if polled:
            with page.expect_response(lambda r: "clock=" in r.url):
                page.clock.run_for(ms)
        else:
            page.clock.run_for(ms)
        assert polls() == before + polled, (ms, polls())

    # 2 s, then each unchanged poll (204) doubles the wait, up to 30 s.
    for wait in (2_000, 4_000, 8_000, 16_000, 30_000, 30_000):
        run(wait - 100, polled=False)
        run(100, polled=True)
    # A colleague claims it: the next poll (30 s on) draws it, and the pace is 2 s again.
    until = timezone.now() + timedelta(hours=1)
    Ticket.objects.filter(pk=ticket.pk).update(claimed_by=colleague, claim_expires_at=until)
    run(30_000, polled=True)
    expect(page.locator(f"#review-{ticket.pk}")).to_contain_text("Being looked at by bea")
    run(1_900, polled=False)
    run(100, polled=True)

    # Hidden, the tab does not poll at all; shown again, it polls at once.
    hide = "v => { Object.defineProperty(document, 'hidden', {value: v, configurable: true});"
    hide += " document.dispatchEvent(new Event('visibilitychange')); }"
    page.evaluate(hide, True)
    run(120_000, polled=False)
    with page.expect_response(lambda r: "clock=" in r.url):
        page.evaluate(hide, False)
    assert polls() >= 1

    # An action polls at once (its answer rings queueChanged), whatever the pace was.
    Ticket.objects.filter(pk=ticket.pk).update(claimed_by=None, claim_expires_at=None)
    run(3_900, polled=False)  # the poll on showing was a 204: the next is 4 s on
    run(100, polled=True)
    run(1_000, polled=False)
    count = polls()
    with page.expect_response(lambda r: "clock=" in r.url):
        page.locator(f"#review-{ticket.pk} button[name=claim]").click()
    assert polls() == count + 1
    expect(page.locator(f"#review-{ticket.pk}")).to_contain_text("Yours until")
