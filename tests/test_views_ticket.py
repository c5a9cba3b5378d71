"""The ticket page (and its polled status fragment) and the open-ticket form."""

import json
import re

import pytest
from django.urls import reverse

from refunds import runner
from refunds.models import Charge, Decision, Email, Ticket
from tests.reviewing import awaiting_review

NEW = reverse("reviews:ticket_new")
POLL = {"HX-Request": "true", "HX-Target": "ticket-status"}


def page(ticket: Ticket) -> str:
    return reverse("reviews:ticket", args=[ticket.pk])


def refunded(ticket: Ticket, reviewer) -> Ticket:
    """What the runner leaves behind after an approval went through, without running it."""
    Decision.objects.create(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=reviewer,
        answer="approve",
        reason="late indeed",
    )
    Charge.objects.create(
        ticket=ticket,
        order=ticket.order,
        idempotency_key=f"{ticket.thread_id}:charge_card:{ticket.order.number}:{ticket.amount_cents}",
        amount_cents=ticket.amount_cents,
        receipt="rcpt-test-1",
        status="succeeded",
    )
    Ticket.objects.filter(pk=ticket.pk).update(
        status=Ticket.Status.REFUNDED,
        pending_interrupt_id="",
        pending_payload=None,
        next_nodes=[],
        outcome_reason="Refunded $6.99.",
        nodes_run=ticket.nodes_run + ["approve", "charge_order:1042", "settle_charges", "email"],
    )
    ticket.refresh_from_db()
    return ticket


# --- the ticket page ---------------------------------------------------------------------------
def test_it_shows_a_refund_from_review_to_receipt_through_the_real_runner(
    transactional_db, client, agent, colleague, late_order
):
    client.force_login(agent)
    client.post(NEW, {"order_number": "1042", "note": "4 days late"})
    ticket = Ticket.objects.get()
    assert runner.advance(ticket.pk) == "awaiting_review"

    html = client.get(page(ticket)).content.decode()
    assert "Awaiting review" in html
    assert "Checked order 1042 → Gathered the checks" in html
    assert "Chose who reviews" in html
    assert "<strong>Refund $6.99</strong>" in html  # the review's markdown, rendered
    assert "Customer says: 4 days late" in html
    assert 'name="approve"' not in html and "four-eyes" in html  # not the one who opened it
    client.force_login(colleague)
    html = client.get(page(ticket)).content.decode()
    assert 'name="approve"' in html  # another agent decides $6.99
    assert 'hx-trigger="every 2s"' in html  # and the page keeps itself current

    ticket.refresh_from_db()
    client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"},
    )
    html = client.get(page(ticket)).content.decode()
    assert "Approved by <strong>bea</strong>" in html and "being applied" in html
    assert "Applying the decision" in html and 'name="approve"' not in html

    assert runner.advance(ticket.pk) == "refunded"
    charge, email = Charge.objects.get(), Email.objects.get()
    html = client.get(page(ticket)).content.decode()
    # The status says "Refunded" once, the amount beside it (not "Refunded Refunded $6.99.").
    assert 'id="ticket-status-pill">Refunded</span>' in html
    assert '<span class="muted" id="ticket-outcome"> $6.99.</span>' in html
    assert (
        "Review by a person → Charged the refund of order 1042 → Settled the charges → "
        "Emailed the confirmation"
    ) in html
    assert charge.receipt in html and "$6.99" in html
    assert f"“{email.subject}” to ana@example.com" in html and "sent " in html
    assert "Approved by <strong>bea</strong>" in html and "being applied" not in html
    assert 'name="approve"' not in html
    assert 'hx-trigger="every 2s"' not in html


def test_it_shows_a_decline_by_policy_through_the_real_runner(
    transactional_db, client, agent, on_time_order
):
    client.force_login(agent)
    client.post(NEW, {"order_number": "1043"})
    ticket = Ticket.objects.get()
    assert runner.advance(ticket.pk) == "declined"

    html = client.get(page(ticket)).content.decode()
    assert "Declined by policy" in html and "arrived 1 day early" in html
    assert "No decision yet" not in html  # nobody was asked
    assert "No charge" in html and "About your refund request for order 1043" in html


def test_it_shows_a_rejection_with_who_made_it_and_why(client, agent, manager, late_order):
    ticket = awaiting_review(late_order)
    Decision.objects.create(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=agent,
        answer="reject",
        reason="Signed for on time",
    )
    Ticket.objects.filter(pk=ticket.pk).update(
        status=Ticket.Status.REJECTED,
        outcome_reason="Signed for on time",
        pending_interrupt_id="",
        pending_payload=None,
    )
    client.force_login(manager)
    html = client.get(page(ticket)).content.decode()
    assert "Rejected by reviewer" in html
    assert "Rejected by <strong>agent</strong>" in html and "Signed for on time" in html


def test_it_shows_a_review_to_someone_who_may_not_decide_it(client, agent, big_order):
    ticket = awaiting_review(big_order, opened_by=agent)
    client.force_login(agent)
    html = client.get(page(ticket)).content.decode()
    assert "Awaiting review" in html
    assert "This refund is decided by a manager" in html
    assert 'name="approve"' not in html


def test_it_serves_the_status_fragment_to_a_poll_while_the_ticket_moves(client, agent, late_order):
    ticket = awaiting_review(late_order)
    client.force_login(agent)
    response = client.get(page(ticket), headers=POLL)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<div id="ticket-status"') and "<html" not in html
    assert 'hx-trigger="every 2s"' in html


def test_it_stops_the_poll_once_the_ticket_is_final(client, agent, late_order):
    ticket = refunded(awaiting_review(late_order), agent)
    client.force_login(agent)
    response = client.get(page(ticket), headers=POLL)
    assert response.status_code == 286  # htmx's "stop polling"
    html = response.content.decode()
    assert "Refunded" in html and "rcpt-test-1" in html
    assert "hx-trigger" not in html


def test_it_stops_the_poll_once_the_ticket_failed(client, agent, late_order):
    ticket = awaiting_review(late_order)
    Ticket.objects.filter(pk=ticket.pk).update(
        status=Ticket.Status.FAILED, last_error="RuntimeError: boom"
    )
    client.force_login(agent)
    response = client.get(page(ticket), headers=POLL)
    assert response.status_code == 286
    assert "RuntimeError: boom" in response.content.decode()


def test_it_redirects_anonymous_users_to_log_in(client, late_order):
    ticket = awaiting_review(late_order)
    for headers in ({}, POLL):
        response = client.get(page(ticket), headers=headers)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_it_answers_404_for_an_unknown_ticket(client, agent):
    client.force_login(agent)
    assert client.get(reverse("reviews:ticket", args=[999])).status_code == 404


def test_it_rejects_post(client, agent, late_order):
    ticket = awaiting_review(late_order)
    client.force_login(agent)
    assert client.post(page(ticket)).status_code == 405


# --- the open-ticket form ----------------------------------------------------------------------
def test_it_shows_the_form(client, agent):
    client.force_login(agent)
    response = client.get(NEW)
    assert response.status_code == 200
    assert 'name="order_number"' in response.content.decode()


def test_it_opens_a_ticket_and_shows_its_page(client, agent, late_order):
    client.force_login(agent)
    response = client.post(NEW, {"order_number": " 1042 ", "note": "4 days late"})
    ticket = Ticket.objects.get()
    assert response.status_code == 302
    assert response["Location"] == page(ticket)
    assert ticket.opened_by == agent and ticket.note == "4 days late"
    assert ticket.status == Ticket.Status.NEW


def test_it_opens_a_ticket_from_the_queue_with_htmx(client, agent, late_order):
    client.force_login(agent)
    response = client.post(NEW, {"order_number": "1042"}, headers={"HX-Request": "true"})
    ticket = Ticket.objects.get()
    assert response.status_code == 200
    assert "ticketsChanged" in json.loads(response["HX-Trigger"])
    html = response.content.decode()
    assert html.startswith('<form id="ticket-form"')
    assert f"ticket {ticket.pk}</a> for order 1042" in html
    assert 'value=""' in html  # emptied for the next one


@pytest.mark.parametrize("htmx", [False, True])
def test_it_refuses_an_unknown_order(client, agent, late_order, htmx):
    client.force_login(agent)
    response = client.post(
        NEW,
        {"order_number": "9999", "note": "where is it"},
        headers={"HX-Request": "true"} if htmx else {},
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "There is no order 9999." in html
    assert 'value="9999"' in html and "where is it" in html  # what was typed is kept
    assert not Ticket.objects.exists()


@pytest.mark.parametrize("htmx", [False, True])
def test_it_refuses_an_empty_order_number(client, agent, late_order, htmx):
    client.force_login(agent)
    response = client.post(
        NEW, {"order_number": "   "}, headers={"HX-Request": "true"} if htmx else {}
    )
    assert response.status_code == 400
    assert "Enter an order number." in response.content.decode()
    assert not Ticket.objects.exists()


def test_it_redirects_anonymous_users_from_the_form_to_log_in(client, late_order):
    for response in (client.get(NEW), client.post(NEW, {"order_number": "1042"})):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    assert not Ticket.objects.exists()


# --- earlier tickets, undelivered email, resend ---------------------------------------------------
def test_the_review_card_shows_earlier_tickets_of_the_order_and_of_the_customer(
    client, agent, late_order
):
    from tests.conftest import make_order

    earlier = Ticket.objects.create(
        thread_id="refund-1042-old", order=late_order, status="rejected"
    )
    other_order = make_order("1099", name="Ana Souza")
    other = Ticket.objects.create(
        thread_id="refund-1099-x", order=other_order, status="refunded", amount_cents=500
    )
    ticket = awaiting_review(late_order)
    client.force_login(agent)
    html = client.get(page(ticket)).content.decode()
    assert "Earlier tickets for order 1042:" in html and f"ticket {earlier.pk}</a>" in html
    assert "Other tickets of Ana Souza:" in html and "order 1099</a> (refunded, $5.00)" in html
    assert f"/tickets/{other.pk}/" in html


def undelivered(ticket: Ticket) -> Email:
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.REFUNDED)
    return Email.objects.create(
        ticket=ticket,
        key=f"{ticket.thread_id}:email",
        to="ana@example.com",
        subject="Your refund for order 1042",
        body="...",
        attempts=4,
        last_error="the mail server deferred the message: 451 try later",
    )


def test_an_undelivered_email_shows_why_and_admins_get_a_resend_button(
    client, agent, admin_user, late_order
):
    ticket = awaiting_review(late_order)
    email = undelivered(ticket)
    resend = reverse("ops:resend", args=[email.pk])
    client.force_login(agent)
    html = client.get(page(ticket)).content.decode()
    assert "not delivered</strong>: the mail server deferred the message: 451" in html
    assert resend not in html
    assert client.post(resend).status_code == 403

    client.force_login(admin_user)
    assert resend in client.get(page(ticket)).content.decode()


def test_a_resend_from_the_ticket_page_comes_back_to_it_and_never_to_another_site(
    client, admin_user, late_order, monkeypatch
):
    monkeypatch.setattr("refunds.enqueue.resend_on_commit", lambda email_id: None)
    ticket = awaiting_review(late_order)
    resend = reverse("ops:resend", args=[undelivered(ticket).pk])
    client.force_login(admin_user)
    assert f'name="next" value="{page(ticket)}"' in client.get(page(ticket)).content.decode()
    back = client.post(resend, {"next": page(ticket)}, follow=True)
    assert back.redirect_chain[-1][0] == page(ticket)
    assert "Sending “Your refund for order 1042” to ana@example.com again." in back.content.decode()
    elsewhere = client.post(resend, {"next": "https://evil.example/"})
    assert elsewhere["Location"] == reverse("ops:undelivered")


def test_an_escalated_ticket_says_throughout_that_a_manager_decides(client, manager, late_order):
    from refunds import services
    from tests.conftest import _persona

    ticket = awaiting_review(late_order)
    agent = _persona("agent3", "Support agents")
    services.ticket_escalate(ticket=ticket, by=agent, note="Customer disputes the date.")
    client.force_login(manager)
    html = client.get(page(ticket)).content.decode()
    assert "a manager (escalated from the support agents)" in html
    assert "Waiting on a manager: escalated from the support agents." in html
    assert "support agent." not in html.lower() and "a support agent (" not in html


# --- developer words: admins only, behind a disclosure ---------------------------------------
TECHNICAL = re.compile(r'<details class="technical[^"]*"[^>]*>.*?</details>', re.S)


def developer_words(ticket: Ticket) -> list[str]:
    """What a developer reads and a reviewer should not have to: node names, the thread id, the
    charge's idempotency key, the flow version."""
    return [
        "check_order:1042 → gather",
        "→ triage",
        ticket.thread_id,
        f"{ticket.thread_id}:charge_card:",
        f"<dd>{ticket.flow_version}</dd>",
        "Thread",
        "flow version",
    ]


@pytest.fixture
def refunded_ticket(transactional_db, client, agent, colleague, late_order) -> Ticket:
    client.force_login(agent)
    client.post(NEW, {"order_number": "1042", "note": "4 days late"})
    ticket = Ticket.objects.get()
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    ticket = refunded(ticket, colleague)
    # What a second triage leaves (a fork, a refused charge back to review): said once.
    Ticket.objects.filter(pk=ticket.pk).update(nodes_run=ticket.nodes_run + ["triage", "triage"])
    ticket.refresh_from_db()
    return ticket


@pytest.mark.parametrize("reader", ["agent", "manager"])
def test_a_reviewers_ticket_page_says_what_happened_without_developer_words(
    client, refunded_ticket, request, reader
):
    client.force_login(request.getfixturevalue(reader))
    html = client.get(page(refunded_ticket)).content.decode()
    assert "What happened" in html and "Settled the charges → Emailed the confirmation" in html
    assert "Chose who reviews → Chose who reviews" not in html
    assert "Technical details" not in html
    for words in developer_words(refunded_ticket) + ["Steps run", "Technical details"]:
        assert words not in html, words


def test_an_admins_ticket_page_keeps_the_ids_inside_the_technical_details(
    client, refunded_ticket, admin_user
):
    client.force_login(admin_user)
    html = client.get(page(refunded_ticket)).content.decode()
    disclosures = TECHNICAL.findall(html)
    assert len(disclosures) == 1 and "<summary>Technical details</summary>" in disclosures[0]
    inside, outside = disclosures[0], TECHNICAL.sub("", html)
    assert refunded_ticket.thread_id in inside and "check_order:1042 → gather" in inside
    assert f"{refunded_ticket.thread_id}:charge_card:1042:699" in inside
    for words in developer_words(refunded_ticket):
        assert words not in outside, words
    # The polled fragment never carries it (an open disclosure would shut every 2 s).
    poll = client.get(page(refunded_ticket), headers=POLL).content.decode()
    assert "Technical details" not in poll and refunded_ticket.thread_id not in poll


# --- what was read from the customer's message, and sending it back ----------------------------
@pytest.fixture
def from_a_message(transactional_db, agent, late_order, monkeypatch):
    """A message an agent sorted into a damaged-item ticket, run by the real runner to its
    manager review."""
    from intake import sorting
    from refunds import enqueue
    from tests.sorting_messages import a_reading, waiting_message

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)
    reading = a_reading(read_by="anthropic:claude-test", fallback="")
    message = waiting_message(reading=reading)
    ticket = sorting.message_sort(
        message=message, order_numbers=["1042"], reason="damaged", by=agent
    ).opened
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    return ticket


def test_the_ticket_page_shows_what_was_read_by_whom_and_the_message_itself(
    client, manager, from_a_message
):
    client.force_login(manager)
    html = client.get(page(from_a_message)).content.decode()
    assert '<dd id="ticket-reason">Damaged</dd>' in html
    assert "Read by anthropic:claude-test" in html
    assert "<q>the mug arrived in pieces</q>" in html and "<q>order #1042</q>" in html
    assert "The mug arrived broken; Ana asks for her money back." in html
    message = from_a_message.messages.get()
    entry = html[html.index(f'id="timeline-message-{message.pk}"') :]
    assert "Message from ana@example.com by api: <strong>Broken mug</strong>" in entry
    assert "It was order #1042. Thanks, Ana" in entry
    assert reverse("reviews:send_back", args=[from_a_message.pk]) in html


def test_the_ticket_page_shows_the_models_fallback_note(client, manager, late_order):
    from tests.sorting_messages import a_reading

    ticket = awaiting_review(late_order)
    Ticket.objects.filter(pk=ticket.pk).update(
        reading=a_reading(fallback="the model answered no valid JSON.")
    )
    client.force_login(manager)
    html = client.get(page(ticket)).content.decode()
    assert "Read by rules" in html
    assert "The model's reading was not used:</strong> the model answered no valid JSON." in html


def test_a_ticket_opened_by_number_shows_no_reading_and_no_send_back(client, manager, late_order):
    ticket = awaiting_review(late_order)
    client.force_login(manager)
    html = client.get(page(ticket)).content.decode()
    assert '<dd id="ticket-reason">Late delivery</dd>' in html
    assert "Read by" not in html and "send-back" not in html


def test_a_reviewer_sends_a_misread_message_back_from_the_ticket_page(
    client, manager, from_a_message
):
    from intake.models import Message

    client.force_login(manager)
    url = reverse("reviews:send_back", args=[from_a_message.pk])
    response = client.post(url, {"why": "It is the saucer, order 1044."}, headers=POLL)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<div id="ticket-status"')
    assert "Sent the message about order 1042 back to Needs sorting" in html
    message = Message.objects.get()
    assert message.status == Message.Status.NEEDS_SORTING
    assert message.sorting_reason == "Sent back by manager: It is the saucer, order 1044."
    assert Decision.objects.get(ticket=from_a_message).answer == "reject"
    assert runner.advance(from_a_message.pk) == "rejected"
    assert not Charge.objects.exists()


@pytest.mark.parametrize("why", ["", "x" * 2001])
def test_sending_back_without_a_good_word_is_a_form_error_that_changes_nothing(
    client, manager, from_a_message, why
):
    from intake.models import Message

    client.force_login(manager)
    url = reverse("reviews:send_back", args=[from_a_message.pk])
    response = client.post(url, {"why": why, "back": "ticket"}, follow=True)
    assert response.status_code == 200  # back on the ticket page, the error on top
    assert "Say what was misread" in response.content.decode() or "at most" in (
        response.content.decode()
    )
    assert Message.objects.get().status == Message.Status.OPENED
    assert not Decision.objects.exists()


def test_an_agent_may_not_send_back_a_managers_review(client, colleague, from_a_message):
    from intake.models import Message

    client.force_login(colleague)
    url = reverse("reviews:send_back", args=[from_a_message.pk])
    # A manager's review is out of an agent's sight: as if it did not exist.
    assert client.post(url, {"why": "misread"}).status_code in (403, 404)
    assert Message.objects.get().status == Message.Status.OPENED
