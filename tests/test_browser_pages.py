"""The pages a shift lives in, measured in a real browser (Debian's chromium, the live server):
on a 390x844 phone the menu is one line and one review fits under it; a confirmation never
covers the next card's buttons; the history's diagram, which scrolls sideways on a phone, is
reached by the keyboard and named. Screenshots go to var/test/screenshots/ for a person to look
at."""

from __future__ import annotations

import re

import pytest

from refunds import enqueue, runner, services
from refunds.models import Ticket
from tests.conftest import make_order
from tests.reviewing import advance_to_review, awaiting_review, decide
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser]

PHONE = {"width": 390, "height": 844}
DESK = {"width": 1280, "height": 800}
ONE_LINE_PX = 56  # the header of one line of links: a 15 px line, its padding and border

# Every element that scrolls (its overflow is auto or scroll and its content is larger) and
# neither takes the focus nor holds something that does: the keyboard cannot scroll it (axe's
# scrollable-region-focusable). And those that take the focus without a name to announce.
UNREACHABLE_SCROLLERS = """() => {
  const focusable = 'a[href], button, input, select, textarea, summary, '
    + '[tabindex]:not([tabindex="-1"])';
  const scrolls = e => {
    const s = getComputedStyle(e);
    return (/(auto|scroll)/.test(s.overflowX) && e.scrollWidth > e.clientWidth + 1)
        || (/(auto|scroll)/.test(s.overflowY) && e.scrollHeight > e.clientHeight + 1);
  };
  const name = e => e.getAttribute('aria-label') || e.getAttribute('aria-labelledby');
  return [...document.querySelectorAll('body *')].filter(scrolls)
    .filter(e => !(e.matches(focusable) || e.querySelector(focusable))
      || (e.matches('[tabindex]') && !name(e)))
    .map(e => e.tagName.toLowerCase() + '.' + e.className);
}"""


def _queue_of(count: int, opened_by) -> list[Ticket]:
    names = ["Ana Ruiz", "Bo Kim", "Cy Dahl", "Di Park", "Ed Moss", "Flo Ng"]
    return [
        awaiting_review(
            make_order(str(1100 + i), fee_cents=500 + 100 * i, name=names[i]), opened_by=opened_by
        )
        for i in range(count)
    ]


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


@pytest.mark.parametrize("screen", [PHONE, DESK], ids=["390x844", "1280x800"])
def test_the_menu_is_one_line_and_a_whole_review_fits_under_it(
    browser,  # noqa: F811
    live_server,
    admin_user,
    colleague,
    settings,
    screen,
):
    """An admin's menu, the longest there is (the queue, the tickets, sorting, the audit, the
    dashboard, the admins' three pages, the API token, the admin, logging out)."""
    from playwright.sync_api import expect

    settings.REFUNDS_FAKES_BANNER = []  # production's screen: the suite itself runs with fakes
    first, *_ = _queue_of(3, colleague)
    page = page_for(browser, live_server, admin_user, width=screen["width"])
    page.set_viewport_size(screen)
    page.goto(f"{live_server.url}/")
    header = page.locator("header.top").bounding_box()
    width = screen["width"]
    page.screenshot(path=str(shots() / f"pages-menu-{width}x{screen['height']}.png"))
    assert header and header["height"] <= ONE_LINE_PX, header
    # Every link of the menu is still there: on a phone the row scrolls sideways, its own way.
    nav = page.locator("header.top nav")
    for name in ("Review queue", "Tickets", "Audit", "Dashboard", "Reconcile", "Admin"):
        link = nav.get_by_role("link", name=name, exact=True)
        link.scroll_into_view_if_needed()
        box = link.bounding_box()
        assert box and box["y"] < header["y"] + header["height"], name
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (name, box)
    nav.get_by_role("button", name="Log out admin").scroll_into_view_if_needed()
    expect(nav.get_by_role("button", name="Log out admin")).to_be_in_viewport()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # One whole review, its buttons included, on the first screen.
    page.evaluate("window.scrollTo(0, 0)")
    card = page.locator(f"#review-{first.pk}").bounding_box()
    approve = page.locator(f"#review-{first.pk} button[name=approve]").bounding_box()
    assert card and approve
    assert card["y"] + card["height"] <= screen["height"], card
    assert approve["y"] + approve["height"] <= screen["height"], approve
    assert page.evaluate(UNREACHABLE_SCROLLERS) == []
    assert csp_problems(page, page.console_messages_seen) == []


@pytest.mark.parametrize("screen", [PHONE, DESK], ids=["390x844", "1280x800"])
def test_confirmations_never_cover_the_next_cards_buttons(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    settings,
    screen,
):
    """Three approvals in a row, each on the card that came up next: the confirmations of the
    earlier ones are never over a button of the review on screen."""
    from playwright.sync_api import expect

    settings.REFUNDS_FAKES_BANNER = []
    tickets = _queue_of(6, colleague)
    page = page_for(browser, live_server, agent, width=screen["width"])
    page.set_viewport_size(screen)
    page.goto(f"{live_server.url}/")
    for n, ticket in enumerate(tickets[:3]):
        page.locator(f"#review-{ticket.pk} button[name=approve]").click()
        expect(page.locator(f"#review-{ticket.pk}")).to_contain_text("Approved")
        expect(page.locator("#messages .flash").first).to_contain_text(f"for order {1100 + n}")
        following = page.locator(f"#review-{tickets[n + 1].pk}")  # where the eyes go next
        name = f"pages-toast-{screen['width']}-{n + 1}.png"
        page.screenshot(path=str(shots() / name))
        toasts = [
            box
            for flash in page.locator("#messages .flash").all()
            if flash.is_visible() and (box := flash.bounding_box())
        ]
        assert toasts, "the confirmation shows"
        controls = following.locator("button, summary, a, input").all()
        for control in controls:
            box = control.bounding_box()
            if not box or not control.is_visible():
                continue
            covering = [t for t in toasts if _overlap(t, box)]
            assert covering == [], (control.inner_text(), box, covering)
    assert csp_problems(page, page.console_messages_seen) == []


@pytest.mark.parametrize("screen", [PHONE, DESK], ids=["390x844", "1280x800"])
def test_the_historys_diagram_is_reached_by_the_keyboard_and_named(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    admin_user,
    screen,
    monkeypatch,
):
    from playwright.sync_api import expect

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    make_order("1042")
    ticket = advance_to_review(services.ticket_open(order_number="1042", opened_by=agent))
    decide(ticket, colleague)
    assert runner.advance(ticket.pk) == "refunded"
    page = page_for(browser, live_server, admin_user, width=screen["width"])
    page.set_viewport_size(screen)
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/history/")
    box = page.locator(".diagram .scroll-box")
    if screen["width"] == 390:
        assert box.evaluate("b => b.scrollWidth > b.clientWidth")  # it does scroll there
    assert page.evaluate(UNREACHABLE_SCROLLERS) == []
    # Tabbing from the page's top reaches the drawing, named, and the arrow keys scroll it.
    page.locator("#history-back").focus()
    for _ in range(10):
        page.keyboard.press("Tab")
        if box.evaluate("b => b === document.activeElement"):
            break
    expect(box).to_be_focused()
    expect(box).to_have_accessible_name(re.compile("The workflow diagram"))
    if screen["width"] == 390:
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "() => document.querySelector('.diagram .scroll-box').scrollLeft > 0"
        )
    page.screenshot(path=str(shots() / f"pages-history-{screen['width']}.png"), full_page=True)
    assert csp_problems(page, page.console_messages_seen) == []
