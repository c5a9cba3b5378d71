"""The review queue page, its polled fragments, and the open-ticket form it carries."""

import json
import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from refunds.models import Decision, Ticket
from reviews.views.queue import DECIDED_SHOWN
from tests.conftest import make_order, templates_rendered
from tests.reviewing import awaiting_review, many_tickets

QUEUE = reverse("reviews:queue")


@pytest.fixture
def reviews(late_order, big_order):
    """One review for agents ($6.99), one for managers ($48.00), one at the line ($20.00)."""
    at_the_line = make_order("1047", late=2, fee_cents=2000, name="Cy Lin")
    return {
        "small": awaiting_review(late_order),
        "big": awaiting_review(big_order),
        "line": awaiting_review(at_the_line),
    }


def review_ids(response) -> set[int]:
    return {t.pk for t in response.context["reviews"]}


POLL = {"HX-Request": "true", "HX-Target": "queue-foot"}


class Screen:
    """A reviewer's queue page as htmx keeps it: the cards it shows (id, version) in order and
    the clock its foot sends back, changed by each poll's answer as its out-of-band swaps say."""

    def __init__(self, client, url: str = QUEUE):
        self.client, self.url = client, url
        page = client.get(url)
        self.clock = page.context["clock"]
        self.cards = [(t.pk, t.card_key) for t in page.context["reviews"]]

    def poll(self):
        shown = ",".join(f"{pk}:{version}" for pk, version in self.cards)
        query = urlencode({"clock": self.clock, "shown": shown})  # beside the url's own, as htmx
        url = f"{self.url}{'&' if '?' in self.url else '?'}{query}"
        response = self.client.get(url, headers=POLL)
        if response.status_code != 200:
            return response
        self.clock = response.context["clock"]
        gone = set(response.context["gone"])
        self.cards = [card for card in self.cards if card[0] not in gone]
        for ticket in response.context["reviews"]:
            card = (ticket.pk, ticket.card_key)
            if not ticket.place:
                self.cards = [card if pk == ticket.pk else (pk, v) for pk, v in self.cards]
            else:
                at = 0 if ticket.place == "top" else 1 + self.pks.index(int(ticket.place[8:]))
                self.cards.insert(at, card)
        return response

    @property
    def pks(self) -> list[int]:
        return [pk for pk, _ in self.cards]


def drawn(response) -> list[int]:
    """The cards a poll drew."""
    return [t.pk for t in response.context["reviews"]]


def test_it_shows_agents_only_reviews_up_to_twenty_dollars(client, agent, reviews):
    client.force_login(agent)
    response = client.get(QUEUE)
    assert response.status_code == 200
    assert review_ids(response) == {reviews["small"].pk, reviews["line"].pk}
    assert b"$6.99" in response.content and b"$20.00" in response.content
    assert b"$48.00" not in response.content


def test_it_shows_managers_only_reviews_over_twenty_dollars(client, manager, reviews):
    client.force_login(manager)
    response = client.get(QUEUE)
    assert review_ids(response) == {reviews["big"].pk}
    assert b"$48.00" in response.content and b"$6.99" not in response.content


def test_it_shows_admins_every_review(client, admin_user, reviews):
    client.force_login(admin_user)
    response = client.get(QUEUE)
    assert review_ids(response) == {t.pk for t in reviews.values()}


def test_it_leaves_out_tickets_that_wait_on_nobody(client, agent, late_order):
    awaiting_review(late_order)
    Ticket.objects.update(status=Ticket.Status.REFUNDED, pending_interrupt_id="")
    client.force_login(agent)
    response = client.get(QUEUE)
    assert review_ids(response) == set()
    assert b"Nothing waits on you" in response.content


def test_it_gives_each_review_a_form_that_works_without_javascript(client, agent, reviews):
    client.force_login(agent)
    html = client.get(QUEUE).content.decode()
    small = reviews["small"]
    assert f'action="{reverse("reviews:decide", args=[small.pk])}"' in html
    assert f'value="{small.pending_interrupt_id}"' in html
    assert 'name="approve"' in html and 'name="reject"' in html
    # The reason and Reject open on demand in a <details>: one line per review, no script.
    assert f'<details class="reject-box" id="reject-{small.pk}"' in html


def test_a_poll_of_a_page_showing_nothing_gets_every_card_out_of_band_not_the_page(
    client, agent, reviews
):
    client.force_login(agent)
    response = client.get(QUEUE, headers=POLL)
    assert response.status_code == 200
    html = re.sub(r">\s+<", "><", response.content.decode())
    assert html.startswith('<tr class="queue-clock" hidden data-clock=')
    assert html.rstrip().endswith("<title>(2) Review queue · Refund Desk</title>")
    assert "<html" not in html
    small, line = reviews["small"].pk, reviews["line"].pk
    assert f'<tbody hx-swap-oob="afterbegin:#queue-rows"><tr id="review-{small}"' in html
    assert f'<tbody hx-swap-oob="afterend:#review-{small}"><tr id="review-{line}"' in html


def test_it_serves_only_the_recent_tickets_to_an_htmx_poll(client, agent, late_order):
    awaiting_review(late_order, opened_by=agent)
    client.force_login(agent)
    response = client.get(QUEUE, headers={"HX-Request": "true", "HX-Target": "recent-tickets"})
    html = response.content.decode()
    assert html.startswith('<tbody id="recent-tickets"')
    assert "order 1042" in html and "Awaiting review" in html


def test_a_poll_draws_the_cards_and_the_foot_as_the_queue_page_does(client, agent, reviews):
    client.force_login(agent)
    page = client.get(QUEUE)
    poll = client.get(QUEUE, headers=POLL)
    assert "reviews/queue.html" in templates_rendered(page)
    rendered = templates_rendered(poll)
    assert rendered[0] == "reviews/queue.html#poll"  # the page's own parts, not the whole page
    assert "reviews/queue.html" not in rendered
    # The same cards and foot the page shows (each response masks its CSRF token anew).
    token = re.compile(r'name="csrfmiddlewaretoken" value="[^"]+"')
    html, answer = token.sub("", page.content.decode()), token.sub("", poll.content.decode())
    cards = re.findall(r'<tr id="review-\d+".*?\n</tr>', answer, re.S)
    assert len(cards) == 2 and all(card in html for card in cards)
    foot = answer[answer.index('<tr class="queue-clock"') : answer.index("<template>")]
    assert foot.strip() in html


def test_it_redirects_anonymous_users_to_log_in(client):
    response = client.get(QUEUE)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_rejects_post(client, agent):
    client.force_login(agent)
    assert client.post(QUEUE).status_code == 405


def test_it_shows_a_recorded_decision_instead_of_the_buttons_until_it_is_applied(
    client, agent, reviews
):
    small = reviews["small"]
    client.force_login(agent)
    client.post(
        reverse("reviews:decide", args=[small.pk]),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1"},
    )
    Decision.objects.filter(ticket=small).update(decided_at=timezone.now() - DECIDED_SHOWN)
    html = _rows(client)
    row = html[html.index(f'id="review-{small.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "Approved by agent at" in row and "a worker is applying it" in row
    assert 'name="approve"' not in row
    assert f'id="review-{reviews["line"].pk}"' in html and 'name="approve"' in html


def _rows(client) -> str:
    """Every card, as a poll of a page showing none draws them."""
    return client.get(QUEUE, headers=POLL).content.decode()


def _row(html: str, ticket) -> str:
    row = html[html.index(f'id="review-{ticket.pk}"') :]
    return row[: row.index("</tr>")]


def test_a_review_just_decided_stays_in_its_place_as_one_line_for_some_seconds(
    client, agent, reviews
):
    small = reviews["small"]
    client.force_login(agent)
    client.post(
        reverse("reviews:decide", args=[small.pk]),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1"},
    )
    line = _row(_rows(client), small)
    assert "Approved $6.99 for order 1042 — being paid out" in line
    assert 'name="approve"' not in line and "data-review" not in line
    # A worker applied it and the ticket left the queue: the line keeps its place meanwhile.
    Ticket.objects.filter(pk=small.pk).update(status=Ticket.Status.RUNNING)
    html = _rows(client)
    assert "Approved $6.99 for order 1042 — being paid out" in _row(html, small)
    assert html.index(f'id="review-{small.pk}"') < html.index(f'id="review-{reviews["line"].pk}"')
    # Some seconds later it is gone: the page's next poll takes it away.
    screen = Screen(client)
    assert small.pk in screen.pks
    Decision.objects.filter(ticket=small).update(decided_at=timezone.now() - DECIDED_SHOWN)
    gone = screen.poll()
    assert gone.context["gone"] == [small.pk] and small.pk not in screen.pks


def test_a_colleagues_decision_is_not_shown_as_mine(client, agent, colleague, reviews):
    small = reviews["small"]
    client.force_login(colleague)
    client.post(
        reverse("reviews:decide", args=[small.pk]),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1"},
    )
    client.force_login(agent)
    row = _row(_rows(client), small)
    assert "Approved by bea at" in row and "being paid out" not in row


@pytest.mark.parametrize(
    ("persona", "says"),
    [
        ("agent", "You decide refunds of $20.00 or less"),
        ("manager", "You decide refunds over $20.00"),
        ("admin_user", "You see every pending review"),
    ],
)
def test_it_says_whose_reviews_the_queue_holds(db, client, request, persona, says):
    client.force_login(request.getfixturevalue(persona))
    assert says in client.get(QUEUE).content.decode()


def test_it_tells_a_user_in_no_group_why_nothing_waits_on_them(client, django_user_model, reviews):
    client.force_login(django_user_model.objects.create_user("temp", password="pw"))
    response = client.get(QUEUE)
    assert review_ids(response) == set()
    assert "You are in no reviewer group" in response.content.decode()


def test_it_says_how_many_more_reviews_wait_beyond_the_page_up_to_a_cap(
    client, agent, late_order, monkeypatch
):
    from reviews.views import queue as views

    monkeypatch.setattr(views, "QUEUE_PAGE", 2)
    monkeypatch.setattr(views, "COUNT_CAP", 4)
    client.force_login(agent)
    for n in range(3):
        awaiting_review(make_order(f"20{n}"))
    assert "the oldest 2 of 3 pending reviews." in client.get("/").content.decode()
    awaiting_review(make_order("203"))
    assert "the oldest 2 of 4 pending reviews." in client.get("/").content.decode()
    awaiting_review(make_order("204"))
    html = client.get("/").content.decode()
    assert "the oldest 2 of more than 4 pending reviews." in html


def test_a_poll_that_shows_the_current_cards_gets_204_and_a_change_gets_that_card(
    client, agent, colleague, reviews
):
    client.force_login(agent)
    screen = Screen(client)
    assert f'data-clock="{screen.clock}"' in client.get(QUEUE).content.decode()
    unchanged = screen.poll()
    assert unchanged.status_code == 204 and unchanged.content == b""
    assert "HX-Request" in unchanged["Vary"]

    small = reviews["small"]
    client.force_login(colleague)
    client.post(reverse("reviews:claim", args=[small.pk]), {"claim": "1"})
    client.force_login(agent)
    changed = screen.poll()
    assert changed.status_code == 200 and drawn(changed) == [small.pk]
    html = changed.content.decode()
    assert "Being looked at by <strong>bea</strong>" in html
    assert f'<tr hx-swap-oob="true" id="review-{small.pk}"' in html  # drawn where it is
    assert "HX-Request" in changed["Vary"]
    assert screen.poll().status_code == 204


def test_the_page_title_counts_the_reviews_waiting(client, agent, reviews):
    client.force_login(agent)
    assert "<title>(2) Review queue · Refund Desk</title>" in client.get(QUEUE).content.decode()
    assert "<title>(2) Review queue" in client.get(QUEUE, headers=POLL).content.decode()


def test_a_flagged_refund_is_impossible_to_miss(client, manager, db):
    flagged = awaiting_review(make_order("1090", fee_cents=15000, name="Flo Rida"))
    flagged.pending_payload["flags"] = ["Shipping fee $150.00 is unusually high."]
    Ticket.objects.filter(pk=flagged.pk).update(pending_payload=flagged.pending_payload)
    client.force_login(manager)
    html = client.get(QUEUE).content.decode()
    assert 'class="review flagged' in html and "⚑ Flagged" in html
    assert "Shipping fee $150.00 is unusually high." in html


def test_every_control_in_a_row_has_a_label(client, agent, reviews):
    import re

    client.force_login(agent)
    html = client.get(QUEUE).content.decode()
    for control in re.findall(r"<(?:textarea|select|input)\b[^>]*>", html):
        if 'type="hidden"' in control:
            continue
        found = re.search(r'id="([^"]+)"', control)
        labelled = "aria-label=" in control or (found and f'for="{found[1]}"' in html)
        assert labelled, control


def test_the_queue_pages_through_a_long_backlog(client, agent, db, monkeypatch):
    from reviews.views import queue as views

    monkeypatch.setattr(views, "QUEUE_PAGE", 2)
    made = [awaiting_review(make_order(f"30{n}")) for n in range(5)]
    client.force_login(agent)
    first = client.get(QUEUE)
    assert [t.pk for t in first.context["reviews"]] == [made[0].pk, made[1].pk]  # oldest first
    assert "Page 1 of 3" in first.content.decode()
    last = client.get(f"{QUEUE}?page=3")
    assert [t.pk for t in last.context["reviews"]] == [made[4].pk]
    assert client.get(f"{QUEUE}?page=99").context["page"] == 3


def test_changed_rows_refresh_the_recent_tickets_with_them(client, agent, reviews):
    client.force_login(agent)
    response = client.get(QUEUE, {"clock": "stale", "shown": ""}, headers=POLL)
    assert response.status_code == 200 and "ticketsChanged" in response["HX-Trigger"]


def test_a_change_to_another_queues_card_moves_the_clock_and_draws_nothing(client, agent, reviews):
    client.force_login(agent)
    screen = Screen(client)
    big = reviews["big"]  # a manager's review: not on an agent's page
    Ticket.objects.filter(pk=big.pk).update(escalated_for=big.pending_interrupt_id)
    answer = screen.poll()
    assert answer.status_code == 200 and drawn(answer) == [] and answer.context["gone"] == []
    # The page slows down as after a 204 (static/desk.js), and learns the new clock.
    assert json.loads(answer["HX-Trigger"]) == {"clockMoved": {}}
    assert screen.poll().status_code == 204


def test_an_agent_sees_their_ticket_escalated_not_just_awaiting_review(
    client, agent, colleague, late_order
):
    from refunds import services

    ticket = awaiting_review(late_order, opened_by=agent)
    services.ticket_escalate(ticket=ticket, by=colleague, note="unusual")
    client.force_login(agent)
    html = client.get(QUEUE).content.decode()
    assert f'data-ticket="{ticket.pk}">Escalated to managers</span>' in html


# --- what was read, on the card ----------------------------------------------------------------
def test_the_card_shows_the_reason_and_what_was_read_with_the_quoted_words(
    client, manager, late_order
):
    from tests.sorting_messages import a_reading

    ticket = awaiting_review(late_order)
    payload = ticket.pending_payload | {
        "reason": "damaged",
        "reading": a_reading(read_by="anthropic:claude-test", amount_cents=699),
    }
    Ticket.objects.filter(pk=ticket.pk).update(
        pending_payload=payload, required_role="manager", reason="damaged"
    )
    client.force_login(manager)
    html = _rows(client)
    row = _row(html, ticket)
    assert '<span class="reading-reason">Damaged</span>' in row
    assert "Sorted as" not in row  # the reason is the one read
    assert "Read by anthropic:claude-test" in row and "asks $6.99" in row
    assert "<q>the mug arrived in pieces</q>" in row
    assert "The mug arrived broken; Ana asks for her money back." in row
    assert reverse("reviews:send_back", args=[ticket.pk]) in row


def test_the_card_says_when_a_person_sorted_it_under_another_reason_than_read(
    client, manager, late_order
):
    from tests.sorting_messages import a_reading

    ticket = awaiting_review(late_order)
    payload = ticket.pending_payload | {"reason": "wrong_item", "reading": a_reading("damaged")}
    Ticket.objects.filter(pk=ticket.pk).update(pending_payload=payload, required_role="manager")
    client.force_login(manager)
    row = _row(_rows(client), ticket)
    assert 'Sorted as <span class="badge badge-escalated">Wrong item</span>' in row
    assert '<span class="reading-reason">Damaged</span>' in row


def test_a_card_without_a_reading_offers_no_send_back(client, agent, reviews):
    client.force_login(agent)
    row = _row(_rows(client), reviews["small"])
    assert "Read by" not in row and "send-back" not in row


def test_a_reviewer_sends_a_misread_message_back_from_the_queue(
    transactional_db, client, manager, agent, late_order, monkeypatch
):
    from intake import sorting
    from intake.models import Message
    from refunds import enqueue, runner
    from tests.sorting_messages import waiting_message

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)
    message = waiting_message()
    ticket = sorting.message_sort(
        message=message, order_numbers=["1042"], reason="wrong_item", by=agent
    ).opened
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(manager)
    url = reverse("reviews:send_back", args=[ticket.pk])
    response = client.post(
        url, {"why": "Not a wrong item: she wants a gift wrap."}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert response.content.decode().startswith(
        f'<tr id="review-{ticket.pk}" class="review decided"'
    )
    assert "queueChanged" in response["HX-Trigger"]
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING and message.handled_by == manager
    assert runner.advance(ticket.pk) == "rejected"  # not refunded
    assert not ticket.charges.exists()
    # Without JavaScript the same form redirects back to the queue.
    again = client.post(url, {"why": "twice"})
    assert again.status_code == 302


def test_an_unchanged_poll_renders_nothing_and_reads_one_index(
    client, agent, reviews, django_assert_max_num_queries
):
    client.force_login(agent)
    screen = Screen(client)
    # Session, user, then the change clock: no card, no count, no decision read.
    with django_assert_max_num_queries(3):
        unchanged = screen.poll()
    assert unchanged.status_code == 204 and unchanged.content == b""
    assert unchanged.templates == []


def test_a_changed_poll_draws_only_the_changed_card_in_a_few_queries(
    client, agent, colleague, db, django_assert_max_num_queries
):
    made = [awaiting_review(make_order(f"40{n}")) for n in range(12)]
    client.force_login(agent)
    screen = Screen(client)
    Ticket.objects.filter(pk=made[5].pk).update(claimed_by=colleague)
    # Session, user, groups, the clock, the page's versions, the count, my decisions, then the
    # one card's rows (ticket, orders, pending decisions), the canned reasons and their texts,
    # and the menu's Needs sorting count: as many as for a page of one card.
    with django_assert_max_num_queries(13):
        changed = screen.poll()
    assert drawn(changed) == [made[5].pk]
    assert changed.content.decode().count('<tr hx-swap-oob="true" id="review-') == 1
    assert changed.context["gone"] == []


def test_a_new_review_is_drawn_in_its_place_and_one_that_left_goes(client, agent, db):
    first, second, third = (awaiting_review(make_order(f"41{n}")) for n in range(3))
    client.force_login(agent)
    screen = Screen(client)
    Ticket.objects.filter(pk=second.pk).update(status=Ticket.Status.RUNNING)
    fourth = awaiting_review(make_order("414"))
    answer = screen.poll()
    assert answer.context["gone"] == [second.pk]
    assert drawn(answer) == [fourth.pk]
    html = re.sub(r">\s+<", "><", answer.content.decode())
    assert f'<template><tr id="review-{second.pk}" hx-swap-oob="delete"></tr></template>' in html
    assert f'<tbody hx-swap-oob="afterend:#review-{third.pk}"><tr id="review-{fourth.pk}"' in html
    assert screen.pks == [first.pk, third.pk, fourth.pk]


def test_an_escalated_review_moves_to_the_top_and_the_rest_stay_as_drawn(
    client, manager, colleague, db
):
    from refunds import services

    made = [awaiting_review(make_order(f"42{n}")) for n in range(3)]
    client.force_login(manager)
    screen = Screen(client, f"{QUEUE}?cover=1")
    services.ticket_escalate(ticket=made[2], by=colleague, note="odd")
    answer = screen.poll()
    assert drawn(answer) == [made[2].pk]
    assert answer.context["gone"] == [made[2].pk]  # taken out where it was, drawn at the top
    html = re.sub(r">\s+<", "><", answer.content.decode())
    assert f'<tbody hx-swap-oob="afterbegin:#queue-rows"><tr id="review-{made[2].pk}"' in html
    assert screen.pks == [made[2].pk, made[0].pk, made[1].pk]


def test_each_reviewer_sees_a_claim_as_theirs_or_a_colleagues(client, agent, colleague, reviews):
    small = reviews["small"]
    client.force_login(agent)
    mine = Screen(client)
    client.force_login(colleague)
    theirs = Screen(client)
    client.force_login(agent)
    client.post(reverse("reviews:claim", args=[small.pk]), {"claim": "1"})
    assert "Yours until" in mine.poll().content.decode()
    client.force_login(colleague)
    assert "Being looked at by <strong>agent</strong>" in theirs.poll().content.decode()


def test_a_poll_with_cards_it_cannot_read_is_refused_and_changes_nothing(client, agent, reviews):
    client.force_login(agent)
    refused = client.get(QUEUE, {"clock": "", "shown": "12:3,x:y"}, headers=POLL)
    assert refused.status_code == 422
    assert "id:version" in refused.content.decode()


def test_a_claim_that_lapses_is_drawn_again_with_nothing_written(client, agent, colleague, reviews):
    client.force_login(colleague)
    client.post(reverse("reviews:claim", args=[reviews["small"].pk]), {"claim": "1"})
    client.force_login(agent)
    screen = Screen(client)
    assert screen.poll().status_code == 204
    claim = timedelta(seconds=settings.REFUNDS_CLAIM_SECONDS)
    assert claim < timedelta(minutes=settings.REFUNDS_REVIEW_WARN_MINUTES)  # only the claim ends
    with time_machine.travel(timezone.now() + claim + timedelta(seconds=5), tick=False):
        lapsed = screen.poll()
    assert lapsed.status_code == 200 and drawn(lapsed) == [reviews["small"].pk]
    assert "Being looked at by" not in _row(lapsed.content.decode(), reviews["small"])


def test_a_review_turning_overdue_is_drawn_again_with_nothing_written(client, agent, reviews):
    client.force_login(agent)
    screen = Screen(client)
    warn = timedelta(minutes=settings.REFUNDS_REVIEW_WARN_MINUTES)
    with time_machine.travel(timezone.now() + warn + timedelta(minutes=1), tick=False):
        overdue = screen.poll()
    assert overdue.status_code == 200
    assert "overdue" in _row(overdue.content.decode(), reviews["small"])


def test_an_unchanged_poll_stays_204_until_the_first_claim_on_the_page_lapses(
    client, agent, colleague, reviews
):
    client.force_login(colleague)
    client.post(reverse("reviews:claim", args=[reviews["small"].pk]), {"claim": "1"})
    ends = Ticket.objects.get(pk=reviews["small"].pk).claim_expires_at
    client.force_login(agent)
    screen = Screen(client)
    with time_machine.travel(ends - timedelta(seconds=1), tick=False):
        assert screen.poll().status_code == 204
    with time_machine.travel(ends + timedelta(seconds=1), tick=False):
        assert drawn(screen.poll()) == [reviews["small"].pk]
        assert screen.poll().status_code == 204  # what turns next is further off


def test_a_decision_my_colleague_recorded_draws_that_card_again(client, agent, colleague, reviews):
    client.force_login(agent)
    screen = Screen(client)
    small = reviews["small"]
    Decision.objects.create(
        ticket=small, interrupt_id=small.pending_interrupt_id, reviewer=colleague, answer="approve"
    )
    changed = screen.poll()
    assert changed.status_code == 200 and drawn(changed) == [small.pk]
    assert "Approved by bea at" in _row(changed.content.decode(), small)


def test_my_decided_line_goes_away_with_time(client, agent, reviews):
    small = reviews["small"]
    client.force_login(agent)
    client.post(
        reverse("reviews:decide", args=[small.pk]),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1"},
    )
    Ticket.objects.filter(pk=small.pk).update(status=Ticket.Status.RUNNING)  # a worker took it
    screen = Screen(client)
    assert small.pk in screen.pks and screen.clock == ""  # every poll reads while it shows
    kept = screen.poll()
    assert kept.status_code == 200 and drawn(kept) == []
    with time_machine.travel(timezone.now() + DECIDED_SHOWN + timedelta(seconds=1), tick=False):
        gone = screen.poll()
    assert gone.context["gone"] == [small.pk]
    assert screen.clock != ""


def test_the_queue_reads_as_many_statements_at_10_tickets_as_at_10000(client, agent, manager, db):
    def fill(count: int) -> None:
        many_tickets(
            count, prefix="Q", waiting=True, opened_by=lambda n: manager if n % 3 else agent
        )

    def counts() -> list[int]:
        found = []
        for user, url in ((agent, QUEUE), (manager, QUEUE), (manager, f"{QUEUE}?cover=1")):
            client.force_login(user)
            with CaptureQueriesContext(connection) as page:
                screen = Screen(client, url)
            with CaptureQueriesContext(connection) as poll:
                assert screen.poll().status_code == 204
            found += [len(page), len(poll)]
        return found

    fill(10)
    small = counts()
    fill(9990)
    assert counts() == small


def test_a_changed_poll_does_not_count_what_it_does_not_show(client, agent, colleague, reviews):
    """A poll that draws a card does not count the messages in Needs sorting: that is the nav's
    count (intake/context_processors.py), and the poll's answer has no nav."""
    client.force_login(agent)
    screen = Screen(client)
    Ticket.objects.filter(pk=reviews["small"].pk).update(claimed_by=colleague)
    with CaptureQueriesContext(connection) as poll:
        assert drawn(screen.poll()) == [reviews["small"].pk]
    assert not [q for q in poll.captured_queries if "intake_message" in q["sql"]]


def test_a_kept_card_carries_each_requests_own_csrf_token(agent, reviews):
    import re

    from django.test import Client

    small = reviews["small"]
    for _ in range(2):  # the second session gets the card the first one rendered
        browser = Client(enforce_csrf_checks=True)
        browser.force_login(agent)
        row = _row(browser.get(QUEUE).content.decode(), small)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', row).group(1)
        claimed = browser.post(
            reverse("reviews:claim", args=[small.pk]), {"claim": "1", "csrfmiddlewaretoken": token}
        )
        assert claimed.status_code == 302
        browser.post(
            reverse("reviews:claim", args=[small.pk]),
            {"unclaim": "1", "csrfmiddlewaretoken": token},
        )


def test_a_kept_card_changes_with_its_ticket_its_reader_and_the_clock(
    client, agent, colleague, reviews
):
    small = reviews["small"]
    client.force_login(agent)
    assert "Approve $6.99" in _row(_rows(client), small)
    Ticket.objects.filter(pk=small.pk).update(amount_cents=650)
    assert "Approve $6.50" in _row(_rows(client), small)
    client.post(reverse("reviews:claim", args=[small.pk]), {"claim": "1"})
    assert "Yours until" in _row(_rows(client), small)
    client.force_login(colleague)
    assert "Being looked at by <strong>agent</strong>" in _row(_rows(client), small)
    client.force_login(agent)
    assert "0 min" in _row(_rows(client), small)
    with time_machine.travel(timezone.now() + timedelta(minutes=3), tick=False):
        assert "3 min" in _row(_rows(client), small)


def _cards_rendered(response) -> int:
    return templates_rendered(response).count("reviews/queue.html#review-row")


def test_a_card_is_kept_in_the_cards_cache_and_rendered_again_once_it_lapses(
    client, agent, reviews
):
    from django.core.cache import caches

    caches["cards"].clear()
    client.force_login(agent)
    cards = _cards_rendered(client.get(QUEUE))
    assert cards >= 1
    assert _cards_rendered(client.get(QUEUE)) == 0  # served from the cache
    caches["cards"].clear()
    assert _cards_rendered(client.get(QUEUE)) == cards


def test_a_card_rendered_for_one_reviewer_serves_the_next_of_the_same_standing(
    client, agent, colleague, manager, reviews
):
    """A changed card is rendered once for the desk: the second agent's page takes the first
    one's cards; a manager's (other buttons) and a claim's holder (theirs, not "in use") do not."""
    from django.core.cache import caches

    caches["cards"].clear()
    small = reviews["small"]
    client.force_login(agent)
    cards = _cards_rendered(client.get(QUEUE))
    assert cards >= 1
    client.force_login(colleague)
    assert _cards_rendered(client.get(QUEUE)) == 0
    client.force_login(manager)
    assert _cards_rendered(client.get(QUEUE)) >= 1
    client.force_login(agent)
    client.post(reverse("reviews:claim", args=[small.pk]), {"claim": "1"})
    assert _cards_rendered(page := client.get(QUEUE)) == 1
    assert "Yours until" in _row(page.content.decode(), small)
    client.force_login(colleague)
    assert _cards_rendered(page := client.get(QUEUE)) == 1
    assert "Being looked at by <strong>agent</strong>" in _row(page.content.decode(), small)


def test_cards_are_shared_through_redis(client, agent, reviews, broker, settings):
    from django.core.cache import caches

    location = "unix://" + str(settings.EMBEDDED_REDIS_SOCKET)
    if not settings.USES_EMBEDDED_BROKER:
        location = settings.CELERY_BROKER_URL
    backend = "django.core.cache.backends.redis.RedisCache"
    settings.CACHES = {
        **settings.CACHES,
        "cards": {"BACKEND": backend, "LOCATION": location, "KEY_PREFIX": "test-cards"},
    }
    caches["cards"].clear()
    client.force_login(agent)
    first = client.get(QUEUE)
    assert _cards_rendered(first) >= 1
    again = client.get(QUEUE)
    assert _cards_rendered(again) == 0
    assert "Approve $6.99" in _row(again.content.decode(), reviews["small"])
    caches["cards"].clear()


def test_a_cards_cache_that_is_down_costs_the_cards_rendering_not_the_page(
    client, agent, reviews, settings
):
    unreachable = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }
    settings.CACHES = {**settings.CACHES, "cards": unreachable}
    client.force_login(agent)
    response = client.get(QUEUE)
    assert response.status_code == 200
    assert "Approve $6.99" in _row(response.content.decode(), reviews["small"])
