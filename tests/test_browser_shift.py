"""A reviewer's shift in a real browser, at a phone's and a desk's width: how many reviews a
screen holds, where the feedback of a decision shows, the keyboard's place after an action, the
loser of a claim race told how it ended, and the desk's own not-found page. Screenshots go to
var/test/screenshots/ for a person to look at."""

from __future__ import annotations

import pytest

from refunds import services
from refunds.models import Decision, Ticket
from tests.conftest import make_order
from tests.reviewing import advance_to_review, awaiting_review, decide
from tests.test_browser import csp_problems
from tests.test_browser_desk import browser, page_for, shots  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser]


def _screen(page, width: int, height: int) -> None:
    page.set_viewport_size({"width": width, "height": height})


def _queue_of(count: int, opened_by) -> list[Ticket]:
    names = ["Ana Ruiz", "Bo Kim", "Cy Dahl", "Di Park", "Ed Moss", "Flo Ng", "Gus Roy", "Hal Li"]
    return [
        awaiting_review(
            make_order(str(1100 + i), fee_cents=500 + 100 * i, name=names[i]), opened_by=opened_by
        )
        for i in range(count)
    ]


def test_a_desk_screen_shows_at_least_six_reviews(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,  # noqa: F811
    settings,
):
    from playwright.sync_api import expect

    settings.REFUNDS_FAKES_BANNER = []  # production's screen: the suite itself runs with fakes

    tickets = _queue_of(8, colleague)
    page = page_for(browser, live_server, agent)
    _screen(page, 1280, 800)
    page.goto(f"{live_server.url}/")
    sixth = page.locator(f"#review-{tickets[5].pk}")
    expect(sixth).to_be_visible()
    page.screenshot(path=str(shots() / "shift-queue-1280x800.png"))
    box = sixth.bounding_box()
    assert box and box["y"] + box["height"] <= 800, box
    # The reason box opens on demand, and works without a script (a <details>).
    reject = page.locator(f"#review-{tickets[0].pk} button[name=reject]")
    expect(reject).to_be_hidden()
    page.locator(f"#review-{tickets[0].pk} summary").click()
    expect(reject).to_be_visible()
    assert csp_problems(page, page.console_messages_seen) == []


@pytest.mark.parametrize("width", [390, 1280])
def test_approving_shows_the_outcome_where_the_review_was_and_keeps_the_keyboard_going(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    width,
):
    from playwright.sync_api import expect

    tickets = _queue_of(4, colleague)
    page = page_for(browser, live_server, agent, width=width)
    page.goto(f"{live_server.url}/")
    second = page.locator(f"#review-{tickets[1].pk}")
    if width == 390:
        second.scroll_into_view_if_needed()
        second.locator("button[name=approve]").click()
    else:
        page.keyboard.press("j")
        page.keyboard.press("j")
        expect(second).to_have_class("review current")
        page.keyboard.press("a")
    done = page.locator(f"#review-{tickets[1].pk}")
    expect(done).to_contain_text("Approved $6.00 for order 1101")
    expect(done).to_be_in_viewport()
    page.screenshot(path=str(shots() / f"shift-approved-{width}.png"))
    assert Decision.objects.get(ticket=tickets[1]).answer == "approve"
    if width == 1280:
        # The selection moved on to the next review: `a` again needs no `j` first.
        third = page.locator(f"#review-{tickets[2].pk}")
        expect(third).to_have_class("review current")
        page.keyboard.press("a")
        expect(page.locator(f"#review-{tickets[2].pk}")).to_contain_text(
            "Approved $7.00 for order 1102"
        )
        assert Decision.objects.get(ticket=tickets[2]).answer == "approve"
    # The line stays through the next poll of the rows, then gives way to the queue's own
    # state of the review (no worker runs here: the decision waits to be applied).
    with page.expect_response(lambda r: "clock=" in r.url, timeout=10_000):
        pass
    expect(done).to_contain_text("Approved $6.00 for order 1101")
    expect(done).to_contain_text("a worker is applying it", timeout=20_000)
    assert csp_problems(page, page.console_messages_seen) == []


def test_the_loser_of_a_claim_race_is_told_how_the_review_ended(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    manager,
):
    from playwright.sync_api import expect

    ticket = awaiting_review(make_order("1042"), opened_by=manager)
    page = page_for(browser, live_server, agent)
    page.goto(f"{live_server.url}/")
    claim = page.locator(f"#review-{ticket.pk} button[name=claim]")
    expect(claim).to_be_visible()
    services.review_claim(ticket=ticket, by=colleague)  # the colleague was a moment faster
    claim.click()
    flash = page.locator("#messages")
    expect(flash).to_contain_text("bea")
    decide(Ticket.objects.get(pk=ticket.pk), colleague)
    expect(flash).to_contain_text("Order 1042 was decided by bea")
    expect(flash).to_contain_text("approved: $6.99")
    expect(page.locator("#messages .flash-error")).to_have_count(0)
    page.screenshot(path=str(shots() / "shift-race-lost-1280.png"))
    assert csp_problems(page, page.console_messages_seen) == []


@pytest.mark.parametrize("width", [390, 1280])
def test_a_link_to_a_ticket_outside_scope_gets_the_desks_page_at_any_width(
    browser,  # noqa: F811
    live_server,
    agent,
    settings,
    width,
):
    from playwright.sync_api import expect

    settings.DEBUG = True  # the demo: Django would answer with its technical 404
    big = awaiting_review(make_order("1045", fee_cents=4800))
    page = page_for(browser, live_server, agent, width=width)
    response = page.goto(f"{live_server.url}/tickets/{big.pk}/")
    assert response and response.status == 404
    expect(page.locator("h1")).to_have_text("Nothing to show here")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(shots() / f"shift-404-{width}.png"), full_page=True)


@pytest.mark.parametrize("width", [390, 1280])
def test_an_escalated_ticket_page_says_a_manager_decides(
    browser,  # noqa: F811
    live_server,
    manager,
    colleague,
    width,
):
    from playwright.sync_api import expect

    ticket = awaiting_review(make_order("1042"))
    services.ticket_escalate(ticket=ticket, by=colleague, note="Customer disputes the date.")
    page = page_for(browser, live_server, manager, width=width)
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    status = page.locator("#ticket-status")
    expect(status).to_contain_text("a manager (escalated from the support agents)")
    expect(status).to_contain_text("Waiting on a manager")
    expect(status).not_to_contain_text("Waiting on a support agent")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(shots() / f"shift-escalated-{width}.png"), full_page=True)
    assert csp_problems(page, page.console_messages_seen) == []


@pytest.mark.parametrize("width", [390, 1280])
def test_technical_details_open_for_an_admin_and_stay_out_of_a_reviewers_way(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    admin_user,
    width,
    monkeypatch,
):
    from playwright.sync_api import expect

    from refunds import enqueue, runner

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    make_order("1042")
    ticket = advance_to_review(services.ticket_open(order_number="1042", opened_by=agent))
    decide(ticket, colleague)
    assert runner.advance(ticket.pk) == "refunded"
    ticket.refresh_from_db()

    page = page_for(browser, live_server, colleague, width=width)
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    expect(page.locator("#ticket-trail")).to_contain_text("Charged the refund")
    expect(page.get_by_text("Technical details")).to_have_count(0)
    assert ticket.thread_id not in page.content()
    page.screenshot(path=str(shots() / f"shift-words-reviewer-{width}.png"), full_page=True)

    page = page_for(browser, live_server, admin_user, width=width)
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/")
    details = page.locator("#technical-details")
    expect(details.get_by_text(ticket.thread_id, exact=True)).to_be_hidden()  # closed until asked
    details.locator("summary").click()
    expect(details.get_by_text(ticket.thread_id, exact=True)).to_be_visible()
    expect(details).to_contain_text(f"{ticket.thread_id}:charge_card:1042:699")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(shots() / f"shift-words-admin-{width}.png"), full_page=True)
    assert csp_problems(page, page.console_messages_seen) == []


def _fits(page, width: int) -> None:
    wide = page.evaluate(
        "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right"
        f" > {width} && !e.closest('.scroll-box, .table-wrap *')).slice(0, 5)"
        ".map(e => e.tagName + '.' + e.className + ' ' + e.getBoundingClientRect().right)"
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= width, wide


@pytest.mark.parametrize("width", [390, 1280])
def test_the_admins_pages_fit_the_screen_and_say_what_they_hold(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    admin_user,
    width,
    monkeypatch,
):
    from playwright.sync_api import expect

    from refunds import enqueue, runner
    from refunds.models import Email

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    make_order("1042")
    ticket = advance_to_review(services.ticket_open(order_number="1042", opened_by=agent))
    decide(ticket, colleague)
    assert runner.advance(ticket.pk) == "refunded"
    Email.objects.filter(ticket=ticket).update(
        status="failed", last_error="SMTPRecipientsRefused: 550 mailbox unavailable"
    )
    # A customer's message the intake gave up on, its acknowledgment (of no ticket) undelivered.
    from django.utils import timezone

    from intake.models import Message

    gave_up = "The intake stopped after 5 attempts (OperationalError: database is locked)."
    message = Message.objects.create(
        key="email:<m1@mail.example.com>",
        channel="email",
        sender="someone.with.a.long.address@example.com",
        subject="Where is my parcel? It has been two weeks and nobody answers my emails",
        body="Hello?",
        received_at=timezone.now(),
        thread_id="intake-browser",
        status="needs_sorting",
        sorting_reason=gave_up,
        last_error=gave_up,
        finished_at=timezone.now(),
    )
    Email.objects.create(
        key=message.ack_key,
        to=message.sender,
        subject=f"Re: {message.subject}",
        body="Thank you for writing to us.",
        status="failed",
        last_error="SMTPServerDisconnected: Connection unexpectedly closed",
    )
    page = page_for(browser, live_server, admin_user, width=width)

    page.goto(f"{live_server.url}/tickets/{ticket.pk}/history/")
    hint, box = page.locator("#diagram-hint"), page.locator(".diagram .scroll-box")
    if width == 390:  # the drawing scrolls inside its own box, and says so
        expect(hint).to_be_visible()
        assert box.evaluate("b => b.scrollWidth > b.clientWidth"), box.evaluate(
            "b => [b.scrollWidth, b.clientWidth, b.firstElementChild.getBoundingClientRect().width]"
        )
    else:
        expect(hint).to_be_hidden()
        assert box.evaluate("b => b.scrollWidth <= b.clientWidth")
    _fits(page, width)
    page.locator(".diagram").screenshot(path=str(shots() / f"shift-diagram-{width}.png"))
    page.screenshot(path=str(shots() / f"shift-history-{width}.png"), full_page=True)

    page.goto(f"{live_server.url}/customers/ana@example.com/")
    opened = page.locator("#customer-tickets td[data-label=Opened]")
    expect(opened).to_be_visible()
    # Nothing of the table is cut: on a phone each row stacks into the width.
    table = page.locator("#customer-tickets")
    assert table.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth")
    _fits(page, width)
    page.screenshot(path=str(shots() / f"shift-customer-{width}.png"), full_page=True)

    for name in ("failed", "undelivered"):
        page.goto(f"{live_server.url}/ops/{name}/")
        expect(
            page.locator(
                f"#given-up-{message.pk}, #email-{Email.objects.get(key=message.ack_key).pk}"
            )
        ).to_be_visible()
        for header in page.locator("th .sr-only").all():
            expect(header).to_have_text("Action")
        # Nothing is cut and every button is on screen: on a phone each row stacks.
        for table in page.locator(".table-wrap > table").all():
            assert table.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth")
        for button in page.locator(".table-wrap button").all():
            box = button.bounding_box()
            assert box is not None and box["x"] + box["width"] <= width, (name, box)
        _fits(page, width)
        page.screenshot(path=str(shots() / f"shift-{name}-{width}.png"), full_page=True)

    assert csp_problems(page, page.console_messages_seen) == []


@pytest.mark.parametrize("width", [390, 1280])
def test_the_fork_form_says_why_is_required_and_names_it_in_the_error(
    browser,  # noqa: F811
    live_server,
    agent,
    admin_user,
    width,
    monkeypatch,
):
    from playwright.sync_api import expect

    from refunds import enqueue

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    make_order("1042")
    ticket = advance_to_review(services.ticket_open(order_number="1042", opened_by=agent))
    page = page_for(browser, live_server, admin_user, width=width)
    page.goto(f"{live_server.url}/tickets/{ticket.pk}/history/")
    page.get_by_role("link", name="Fork from here…").first.click()
    expect(page.locator("label[for=id_reason] .required")).to_be_visible()
    page.get_by_label("Corrected refund amount").fill("$5")
    page.get_by_label("Why").fill("   ")  # blank words pass the browser's own check
    page.get_by_role("button", name="Preview").click()
    error = page.locator("#fork-error")
    expect(error).to_contain_text("Why: Say why you fork the ticket")
    _fits(page, width)
    page.screenshot(path=str(shots() / f"shift-fork-error-{width}.png"), full_page=True)
    assert csp_problems(page, page.console_messages_seen) == []


def test_the_admins_emails_list_fits_a_desk_screen(
    browser,  # noqa: F811
    live_server,
    agent,
    colleague,
    admin_user,
    monkeypatch,
):
    from refunds import enqueue, runner

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # advanced here
    make_order("1042")
    ticket = advance_to_review(services.ticket_open(order_number="1042", opened_by=agent))
    decide(ticket, colleague)
    assert runner.advance(ticket.pk) == "refunded"
    page = page_for(browser, live_server, admin_user, width=1280)
    page.goto(f"{live_server.url}/admin/refunds/email/")
    table = page.locator("#result_list")
    right = table.evaluate("t => t.getBoundingClientRect().right")
    shown = table.evaluate("t => t.parentElement.clientWidth >= t.scrollWidth")
    page.screenshot(path=str(shots() / "shift-admin-emails-1280.png"), full_page=True)
    assert right <= 1280 and shown
