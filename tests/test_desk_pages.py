"""What the desk's pages say (issue 31 items 7, 8, 9, 12): the reading in the desk's words, the
facts of the orders offered in Needs sorting, pages true right after an action, the small ones."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from intake import sorting
from intake.models import Message
from intake.templatetags.intake import language_name, quoted, summary_said
from refunds import enqueue, runner
from refunds.models import AuditEvent, Ticket, TicketOrder
from tests.conftest import make_order
from tests.reviewing import awaiting_review
from tests.sorting_messages import a_reading, waiting_message

QUEUE = reverse("reviews:queue")


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)


def _row(html: str, ticket) -> str:
    row = html[html.index(f'id="review-{ticket.pk}"') :]
    return row[: row.index("</tr>")]


# --- 7: the reading in the desk's words ----------------------------------------------------------
def test_the_reading_names_the_language_and_shows_each_of_the_customers_words_once():
    reading = a_reading("late_delivery", ("1044",)) | {
        "language": "es",
        "summary": "Late delivery, order 1044: Late delivery, order 1044",
        "quotes": {
            "reason": "Late delivery, order 1044",
            "language": "hi, my, the, you, could",
            "orders": "pedido 1044",
        },
    }
    assert language_name("es") == "Spanish" and language_name("pt-br") == "Portuguese"
    assert language_name("xx") == "xx"  # an unknown code is shown, never hidden
    # The summary repeated the subject line: nothing more to say; the quote of it neither.
    assert summary_said(reading) == ""
    assert quoted(reading) == [("Orders", "pedido 1044")]
    said = a_reading() | {"summary": "Damaged, order 1042: the handle came off"}
    assert summary_said(said) == "the handle came off"


def test_the_queue_card_reads_on_one_line_with_the_details_a_click_away(
    client, manager, late_order
):
    ticket = awaiting_review(late_order)
    reading = a_reading() | {
        "language": "es",
        "quotes": a_reading()["quotes"] | {"language": "hola, mi, el"},
    }
    payload = ticket.pending_payload | {"reason": "damaged", "reading": reading}
    Ticket.objects.filter(pk=ticket.pk).update(pending_payload=payload, required_role="manager")
    client.force_login(manager)
    html = client.get(QUEUE, headers={"HX-Request": "true", "HX-Target": "queue-foot"})
    row = _row(html.content.decode(), ticket)
    head = row[row.index('<details class="reading-more">') : row.index("</summary>")]
    assert "Damaged" in head and "order 1042" in head and "Spanish" in head
    assert "hola, mi, el" not in row and "in es" not in row
    assert row.count("The mug arrived broken") == 1  # the summary, once, inside the details


def test_a_ticket_opened_from_a_message_quotes_the_customers_own_words(
    transactional_db, agent, late_order
):
    from intake import steps
    from refunds.flow.nodes import review

    message = waiting_message(status=Message.Status.RECEIVED)
    reading = steps.Reading.from_json(a_reading())
    steps._open_together(message, reading, ["1042"])
    ticket = Ticket.objects.get(order=late_order)
    assert ticket.note == "Hi, the mug arrived in pieces. It was order #1042. Thanks, Ana"
    assert "message" not in ticket.note.lower().split("#")[0]
    assert review  # the review's "Customer says:" line quotes ticket.note


# --- 8: Needs sorting gives the orders' facts ----------------------------------------------------
def test_the_orders_offered_for_a_message_carry_dates_amount_and_status(client, agent):
    order = make_order("1042", late=3)
    order.total_cents = order.paid_cents = 4800
    order.save()
    earlier = awaiting_review(order)
    TicketOrder.objects.get_or_create(ticket=earlier, order=order)
    waiting_message()
    client.force_login(agent)
    html = client.get(reverse("reviews:needs_sorting")).content.decode()
    facts = html[html.index('class="order-facts') :]
    facts = facts[: facts.index("</span>", facts.index("</a>"))]
    assert "Order $48.00" in facts
    assert "promised Nov 2, 2026, delivered Nov 5, 2026 (3 days late)" in facts
    assert f"ticket {earlier.pk}</a>: awaiting review" in facts


# --- 9: pages true right after an action ---------------------------------------------------------
def test_a_message_page_says_where_it_went_and_its_history_lists_the_whole_path(
    transactional_db, client, agent, manager
):
    make_order("1042")
    message = waiting_message()
    ticket = sorting.message_sort(
        message=message, order_numbers=["1042"], reason="damaged", by=agent
    ).opened
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(manager)
    page = client.get(reverse("reviews:message", args=[message.pk])).content.decode()
    assert "Sorted by agent at" in page and f"ticket {ticket.pk}</a>" in page
    history = client.get(reverse("reviews:message_history", args=[message.pk]))
    assert history.status_code == 200
    text = history.content.decode()
    path = text[text.index('id="message-path"') :]
    assert path.index("Came in by api") < path.index("Sorted into a ticket by <strong>agent")
    assert path.index("Sorted into a ticket") < path.index("Now:")
    assert f"ticket {ticket.pk}</a> for order 1042" in path
    # Sent back: the message page says by whom, the history adds the step.
    sorting.message_send_back(ticket=Ticket.objects.get(pk=ticket.pk), why="misread", by=manager)
    page = client.get(reverse("reviews:message", args=[message.pk])).content.decode()
    assert "Sent back to <strong>Needs sorting</strong> by manager at" in page
    text = client.get(reverse("reviews:message_history", args=[message.pk])).content.decode()
    assert "Sent back to Needs sorting by <strong>manager" in text
    assert "<strong>Now:</strong> in" in text


def test_a_message_history_is_refused_to_whoever_may_not_read_the_message(client, agent):
    message = waiting_message(status=Message.Status.OPENED)
    client.force_login(agent)
    response = client.get(reverse("reviews:message_history", args=[message.pk]))
    assert response.status_code == 404


# --- 12: the small ones --------------------------------------------------------------------------
def test_a_refunded_ticket_says_refunded_once(client, manager, late_order):
    ticket = awaiting_review(late_order)
    Ticket.objects.filter(pk=ticket.pk).update(
        status=Ticket.Status.REFUNDED, outcome_reason="Refunded $12.50."
    )
    client.force_login(manager)
    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    status = html[html.index("<dt>Status</dt>") : html.index("<dt>Customer</dt>")]
    assert status.count("Refunded") == 1 and "$12.50." in status


def test_a_running_ticket_is_not_said_to_be_not_started(client, manager, late_order):
    ticket = awaiting_review(late_order)
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.RUNNING, nodes_run=[])
    client.force_login(manager)
    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    trail = html[html.index('id="ticket-trail"') :]
    trail = trail[: trail.index("</dd>")]
    assert "not started" not in trail and "no step has finished yet" in trail


def test_the_audit_list_names_a_ticket_of_two_orders_by_both(client, manager, late_order):
    other = make_order("1044")
    ticket = awaiting_review(late_order)
    TicketOrder.objects.get_or_create(ticket=ticket, order=late_order)
    TicketOrder.objects.get_or_create(ticket=ticket, order=other)
    AuditEvent.objects.create(ticket=ticket, action=AuditEvent.Action.OPEN, actor=manager)
    client.force_login(manager)
    html = client.get(reverse("reviews:audit")).content.decode()
    assert f"Ticket {ticket.pk} · orders 1042, 1044</a>" in html


def test_the_customer_page_gives_dates_in_the_desks_words(client, admin_user):
    from core.clock import day_words

    record = {"amount_cents": 699, "order": "1042", "refunded_on": "2026-11-20"}
    from ops import selectors as ops_selectors

    assert day_words(record["refunded_on"]) == "Nov 20, 2026"
    assert ops_selectors  # the page renders the records through |day (templates/ops/customer.html)
    template = open("templates/ops/customer.html").read()
    assert "{{ r.refunded_on|day }}" in template


def test_escalations_come_first_in_the_managers_queue(client, manager, colleague):
    from refunds import services

    old = awaiting_review(make_order("1050", fee_cents=5000))
    Ticket.objects.filter(pk=old.pk).update(review_since=timezone.now() - timedelta(hours=2))
    escalated = awaiting_review(make_order("1051", fee_cents=699, name="Bo Ek"))
    services.ticket_escalate(ticket=escalated, by=colleague, note="unusual")
    client.force_login(manager)
    html = client.get(QUEUE).content.decode()
    assert html.index(f'id="review-{escalated.pk}"') < html.index(f'id="review-{old.pk}"')


def test_after_saving_the_answers_per_order_the_ticket_page_shows_the_new_state(
    transactional_db, client, manager
):
    from tests.test_views_several import three_orders

    ticket = three_orders()
    client.force_login(manager)
    form = {
        "interrupt_id": ticket.pending_interrupt_id,
        "orders": "1",
        "back": "ticket",
        "order-1042": "approve",
        "amount-1042": "6.99",
        "order-1049": "reject",
        "reason": "A fee this high needs the carrier's report.",
    }
    url = reverse("reviews:decide", args=[ticket.pk])
    headers = {"HX-Request": "true", "HX-Target": "ticket-status"}
    fragment = client.post(url, form, headers=headers).content.decode()
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    for html in (fragment, page):
        pill = html[html.index('id="ticket-status-pill"') :]
        assert pill.startswith('id="ticket-status-pill">Applying the decision<')
        assert "Save the answers per order" not in html and 'name="order-1042"' not in html
        assert "Decided (see below); a worker is applying it." in html
