"""intake/sorting.py: a person sorts a message into a ticket (once, whoever clicks twice), marks
it not a refund request, or sends a misread one back; bad input changes nothing."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection

from intake import sorting, steps
from intake.models import Message, MessageEvent
from refunds import enqueue, mail, policy, runner, services, tasks
from refunds.models import AuditEvent, CannedReason, Decision, Email, Ticket
from reviews.trail import audit_words
from tests.conftest import make_order
from tests.reviewing import advance_to_review, decide
from tests.sorting_messages import a_reading, waiting_message


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    """The outbox rows handed to a worker to send (the test runs the worker's task itself)."""
    sent: list[int] = []
    monkeypatch.setattr(enqueue, "send", lambda task, row_id: sent.append(row_id) or True)
    return sent


def sort(message, by, orders=("1042",), reason=policy.DAMAGED, **kwargs):
    return sorting.message_sort(
        message=message, order_numbers=list(orders), reason=reason, by=by, **kwargs
    )


def nothing_changed(message: Message) -> None:
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING and message.ticket is None
    assert Ticket.objects.count() == 0 and MessageEvent.objects.count() == 0


# --- sorting into a ticket ---------------------------------------------------------------------
def test_sorting_opens_the_ticket_with_the_reason_chosen_and_the_reading(db, agent, late_order):
    message = waiting_message()
    done = sort(message, agent, reason=policy.WRONG_ITEM)
    ticket = done.opened
    assert ticket.order == late_order and ticket.reason == policy.WRONG_ITEM
    assert ticket.reading == message.reading
    assert ticket.opened_by == agent  # the sorter chose its order: four-eyes bars them
    message.refresh_from_db()
    assert message.status == Message.Status.OPENED and message.ticket == ticket
    assert message.handled_by == agent and message.handled_at is not None
    event = MessageEvent.objects.get(message=message)
    assert event.action == "sort" and event.actor == agent
    assert event.answer["orders"] == ["1042"] and event.answer["opened"] == [ticket.pk]
    assert AuditEvent.objects.filter(ticket=ticket, action="open", actor=agent).exists()
    assert sorting.placed_words(done) == f"Opened ticket {ticket.pk} for order 1042."


def test_one_ticket_covers_the_orders_sorted_together(db, agent, late_order):
    make_order("1044", fee_cents=1250)  # Ana's too
    message = waiting_message()
    done = sort(message, agent, orders=["1042", "#1044", "1042"])
    ticket = done.opened
    assert ticket.order_numbers() == ["1042", "1044"] and Ticket.objects.count() == 1
    assert sorting.placed_words(done) == f"Opened ticket {ticket.pk} for orders 1042, 1044."
    message.refresh_from_db()
    assert message.ticket == ticket and message.status == Message.Status.OPENED


def test_an_order_open_elsewhere_gets_the_message_and_the_others_one_ticket(db, agent, late_order):
    make_order("1044")
    make_order("1047")
    already = services.ticket_open(order_number="1044")
    message = waiting_message()
    done = sort(message, agent, orders=["1042", "1044", "1047"])
    ticket = done.opened
    assert ticket.order_numbers() == ["1042", "1047"] and done.added == [(already, ["1044"])]
    assert sorting.placed_words(done) == (
        f"Opened ticket {ticket.pk} for orders 1042, 1047; Added the message to the open "
        f"ticket {already.pk} of order 1044 (an order has one open ticket)."
    )
    message.refresh_from_db()
    assert message.ticket == ticket
    # Where it went, as the message page and the intake read it: a link per ticket.
    assert steps.placed(message)["tickets"] == [
        {"id": already.pk, "orders": ["1044"], "added": True},
        {"id": ticket.pk, "orders": ["1042", "1047"], "added": False},
    ]


def test_a_sorted_tickets_emails_thread_with_the_message_and_its_acknowledgment(
    db, agent, late_order
):
    """Walking the demo, Iris's refund email (her message sorted by hand) stood alone: the
    acknowledgment she had been sent was no part of the ticket's conversation."""
    message = waiting_message()
    Message.objects.filter(pk=message.pk).update(message_id="<late@customer.test>")
    Email.objects.create(key=message.ack_key, to=message.sender, subject="Re: x", body="")
    ticket = sort(message, agent).opened
    Email.objects.create(
        ticket=ticket, key=f"{ticket.thread_id}:email", to=message.sender, subject="s", body=""
    )

    headers = mail.thread_headers(f"{ticket.thread_id}:email")

    ack = mail.message_id(message.ack_key)
    assert headers == {"In-Reply-To": ack, "References": f"<late@customer.test> {ack}"}


def test_orders_of_two_customers_are_refused_together_and_nothing_changes(db, agent, late_order):
    make_order("2001", name="Ben Okafor")
    message = waiting_message()
    with pytest.raises(sorting.SortingError, match="one customer's orders") as refused:
        sort(message, agent, orders=["1042", "2001"], other_customer_ok=True)
    assert "2001 is ben@example.com's" in str(refused.value)
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING and message.ticket is None
    assert Ticket.objects.count() == 0 and not MessageEvent.objects.exists()


def test_an_order_with_an_open_ticket_gets_the_message_instead_of_a_second_ticket(
    db, agent, late_order
):
    already = services.ticket_open(order_number="1042")
    message = waiting_message()
    done = sort(message, agent)
    assert done.opened is None and [t.pk for t, _ in done.added] == [already.pk]
    assert "Added the message to the open ticket" in sorting.placed_words(done)
    message.refresh_from_db()
    assert message.status == Message.Status.ADDED and message.ticket_id == already.pk
    assert Ticket.objects.count() == 1
    note = AuditEvent.objects.get(ticket=already, action="note")
    assert f"Message {message.pk} from ana@example.com" in note.note
    # The timeline says what the note is, not what a second ticket's would be.
    assert audit_words(note) == (
        f"{agent.username} noted: Message {message.pk} from ana@example.com added to this ticket."
    )


def test_a_second_sort_of_the_same_message_opens_nothing(db, agent, colleague, late_order):
    message = waiting_message()
    sort(message, agent)
    stale = Message.objects.get(pk=message.pk)
    stale.status = Message.Status.NEEDS_SORTING  # the colleague's page, loaded before
    with pytest.raises(sorting.SortingError, match="already sorted by agent"):
        sort(stale, colleague)
    assert Ticket.objects.count() == 1 and MessageEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_agents_sorting_at_once_open_one_ticket(agent, colleague, late_order):
    message = waiting_message()
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def one(user):
        try:
            barrier.wait(timeout=10)
            sort(Message.objects.get(pk=message.pk), user)
            outcomes.append("opened")
        except sorting.SortingError as exc:
            outcomes.append(str(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(u,)) for u in (agent, colleague)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(outcomes) == 2 and outcomes.count("opened") == 1, outcomes
    assert "already sorted" in next(o for o in outcomes if o != "opened")
    assert Ticket.objects.count() == 1
    assert MessageEvent.objects.filter(action="sort").count() == 1


def test_another_customers_order_is_refused_unless_the_agent_confirms_it(db, agent, late_order):
    make_order("2001", name="Ben Okafor")
    message = waiting_message()
    with pytest.raises(sorting.SortingError, match="belongs to Ben Okafor"):
        sort(message, agent, orders=["2001"])
    nothing_changed(message)
    done = sort(message, agent, orders=["2001"], other_customer_ok=True)
    assert done.opened.order.number == "2001"
    assert MessageEvent.objects.get().answer["other_customer"] == ["2001"]


@pytest.mark.parametrize(
    ("orders", "reason", "error"),
    [
        ([], policy.DAMAGED, "Pick at least one order"),
        (["  "], policy.DAMAGED, "Pick at least one order"),
        (["9999"], policy.DAMAGED, "There is no order 9999"),
        (["1042", "9999"], policy.DAMAGED, "There is no order 9999"),
        (["10\x0042"], policy.DAMAGED, "is not an order number"),
        (["1042"], "refund_please", "Choose the reason"),
        (["1042"], policy.NOT_REFUND, "mark it not a refund request"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(db, agent, late_order, orders, reason, error):
    message = waiting_message()
    with pytest.raises(sorting.SortingError, match=error):
        sort(message, agent, orders=orders, reason=reason)
    nothing_changed(message)


def test_someone_in_no_desk_group_sorts_nothing(db, django_user_model, late_order):
    nobody = django_user_model.objects.create_user("nobody", password="pw")
    message = waiting_message()
    with pytest.raises(PermissionDenied):
        sort(message, nobody)
    with pytest.raises(PermissionDenied):
        sorting.message_mark_not_refund(message=message, by=nobody, no_reply_why="spam")
    nothing_changed(message)


def test_a_message_already_marked_not_a_refund_is_not_sorted(db, agent, late_order):
    message = waiting_message(status=Message.Status.NOT_REFUND)
    with pytest.raises(sorting.SortingError, match="already sorted"):
        sort(message, agent)
    assert Ticket.objects.count() == 0


# --- not a refund request ----------------------------------------------------------------------
def set_aside_reply() -> CannedReason:
    """One of the replies admins keep for setting aside (migrations 0032 and 0039 seed it)."""
    reply, _ = CannedReason.objects.get_or_create(
        title="Change of address or order details",
        defaults={
            "use": CannedReason.Use.SET_ASIDE,
            "text": "Thank you for your message. This desk handles refunds, so we cannot "
            "change an address or an order from here.",
        },
    )
    return reply


def test_not_a_refund_request_keeps_who_and_when_and_answers_the_customer_once(
    transactional_db, agent, smtp, enqueued
):
    message = waiting_message(
        subject="New address", body="Please send my parcels to 4 Elm Road from now on."
    )
    sorting.message_mark_not_refund(message=message, by=agent, canned=set_aside_reply())
    message.refresh_from_db()
    assert message.status == Message.Status.NOT_REFUND
    assert message.handled_by == agent and message.handled_at is not None
    event = MessageEvent.objects.get()
    assert event.action == "not_refund" and event.actor == agent
    assert event.answer["reply"] == "canned" and event.answer["canned"].startswith("Change")
    with pytest.raises(sorting.SortingError, match="already sorted by agent"):
        sorting.message_mark_not_refund(message=message, by=agent, no_reply_why="x")

    # After commit the reply was handed to a worker once; the worker's task, run here (twice,
    # as a redelivered task would be), sends it once through the outbox.
    (email_id,) = enqueued
    assert event.answer["email"] == email_id
    assert tasks.resend_email(email_id) is True and tasks.resend_email(email_id) is True
    (mail,) = smtp.delivered
    body = mail.body.replace("\r\n", "\n")  # as the customer's mail client shows it
    assert mail.to == ["ana@example.com"] and mail.subject == "Re: New address"
    assert body.startswith("Hello Ana,\n\nThank you for your message.")
    assert "cannot change an address" in body and body.endswith("The Refund Desk\n")


def test_a_set_aside_reply_greets_and_signs_in_the_language_the_message_was_read_in(
    transactional_db, agent, smtp, enqueued
):
    """The greeting, the sign-off and the subject are the customer's language; the agent's own
    words go as written, and the desk keeps the same email in its own language."""
    message = waiting_message(
        subject="", reading=a_reading() | {"language": "es"}, body="Cambien mi dirección."
    )
    sorting.message_mark_not_refund(message=message, by=agent, words="Le llamamos hoy.")
    tasks.resend_email(enqueued[0])
    (mail,) = smtp.delivered
    assert mail.subject == "Sobre su mensaje"
    body = mail.body.replace("\r\n", "\n")
    assert body == "Hola, Ana:\n\nLe llamamos hoy.\n\nEl equipo de reembolsos\n"
    stored = Email.objects.get(pk=enqueued[0])
    assert stored.language == "es" and stored.desk_text.startswith(
        "About your message\n\nHello Ana,"
    )


def test_a_set_aside_reply_threads_with_the_customers_message_and_its_acknowledgment(
    transactional_db, agent, smtp, enqueued
):
    """One conversation in the customer's mail client (issue 31 item 5): the reply answers the
    customer's own message, after the acknowledgment the desk sent them; walking the demo, the
    change-of-address reply carried neither and stood alone beside the acknowledgment."""
    message = waiting_message(subject="New address")
    Message.objects.filter(pk=message.pk).update(message_id="<moved@customer.test>")
    Email.objects.create(key=message.ack_key, to=message.sender, subject="Re: New address", body="")
    sorting.message_mark_not_refund(message=message, by=agent, words="Noted, thank you.")
    tasks.resend_email(enqueued[0])
    (sent,) = smtp.delivered
    ack = mail.message_id(message.ack_key)
    assert sent.in_reply_to == ack
    assert sent.references == f"<moved@customer.test> {ack}"


def test_own_words_are_sent_and_no_reply_needs_a_why(transactional_db, agent, smtp, enqueued):
    message = waiting_message()
    with pytest.raises(sorting.SortingError, match="say why no reply is needed"):
        sorting.message_mark_not_refund(message=message, by=agent)
    with pytest.raises(sorting.SortingError, match="not both"):
        sorting.message_mark_not_refund(message=message, by=agent, words="Hi", no_reply_why="x")
    nothing_changed(message)
    assert not enqueued

    sorting.message_mark_not_refund(message=message, by=agent, words="We will call you today.")
    tasks.resend_email(enqueued[0])
    body = smtp.delivered[0].body.replace("\r\n", "\n")
    assert "Hello Ana,\n\nWe will call you today.\n\nThe Refund Desk" in body

    other = waiting_message(sender="bot@example.com", subject="Newsletter")
    sorting.message_mark_not_refund(message=other, by=agent, no_reply_why="A newsletter.")
    assert MessageEvent.objects.get(message=other).answer == {
        "reply": "none",
        "why": "A newsletter.",
    }
    assert len(enqueued) == 1 and len(smtp.delivered) == 1  # nothing sent for it


def test_a_rejection_reply_is_not_a_set_aside_reply(transactional_db, agent):
    message = waiting_message()
    # Seeded by migration 0010, unless a transactional test before this one flushed the table.
    rejecting, _ = CannedReason.objects.get_or_create(
        title="Delivered on time", defaults={"text": "It was on time."}
    )
    with pytest.raises(sorting.SortingError, match="not one for setting a message aside"):
        sorting.message_mark_not_refund(message=message, by=agent, canned=rejecting)
    nothing_changed(message)


def test_setting_aside_is_undone_once_and_the_reply_stays_sent(
    transactional_db, agent, colleague, smtp, enqueued
):
    message = waiting_message()
    sorting.message_mark_not_refund(message=message, by=agent, canned=set_aside_reply())
    tasks.resend_email(enqueued[0])
    sorting.message_set_aside_undo(message=message, by=colleague)
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING and message.handled_by == colleague
    assert message.sorting_reason == "bea brought it back from the messages set aside."
    assert [e.action for e in MessageEvent.objects.order_by("id")] == [
        "not_refund",
        "undo_not_refund",
    ]
    with pytest.raises(sorting.SortingError, match="not set aside any more"):
        sorting.message_set_aside_undo(message=message, by=agent)
    assert Email.objects.get().status == "sent" and len(smtp.delivered) == 1


def test_two_undoing_at_once_one_wins(transactional_db, agent, colleague):
    """The compare-and-set on the status picks one of two undos racing in two connections."""
    message = waiting_message()
    sorting.message_mark_not_refund(message=message, by=agent, no_reply_why="spam")
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def undo(by):
        try:
            barrier.wait(timeout=10)
            sorting.message_set_aside_undo(message=message, by=by)
            outcomes.append("won")
        except sorting.SortingError:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=undo, args=(u,)) for u in (agent, colleague)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["refused", "won"]
    assert MessageEvent.objects.filter(action="undo_not_refund").count() == 1


# --- sending a misread message back ------------------------------------------------------------
@pytest.fixture
def misread(transactional_db, agent, late_order) -> Ticket:
    """A message sorted into a ticket that waits on a manager's review."""
    message = waiting_message()
    ticket = sort(message, agent).opened
    return advance_to_review(ticket)


def test_sending_back_rejects_the_review_and_the_message_is_sortable_again(
    misread, manager, colleague
):
    sorting.message_send_back(ticket=misread, why="It is order 1044, not 1042.", by=manager)
    message = Message.objects.get()
    assert message.status == Message.Status.NEEDS_SORTING
    assert message.sorting_reason == "Sent back by manager: It is order 1044, not 1042."
    assert message.handled_by == manager
    decision = Decision.objects.get(ticket=misread)
    assert decision.answer == "reject" and decision.reason == sorting.SENT_BACK_REASON
    assert "Sent back to Needs sorting" in decision.note

    assert runner.advance(misread.pk) == "rejected"  # the existing path: no money moved
    misread.refresh_from_db()
    assert misread.status == Ticket.Status.REJECTED and not misread.charges.exists()
    assert not misread.emails.exists()  # a misreading is not a refusal: nothing to tell

    assert steps.placed(message)["tickets"] == []  # no longer on the misread ticket

    make_order("1044", fee_cents=1250)
    done = sort(message, colleague, orders=["1044"])  # sortable again, by someone else
    assert done.opened.order.number == "1044"
    assert [t["id"] for t in steps.placed(message)["tickets"]] == [done.opened.pk]


def test_a_customer_whose_message_is_sent_back_hears_only_the_outcome_of_the_right_order(
    misread, manager, colleague, smtp
):
    """Read at a real SMTP server: no "cannot refund" for the misread ticket, then one email,
    the refund of the order the customer meant."""
    sorting.message_send_back(ticket=misread, why="It is order 1044, not 1042.", by=manager)
    assert runner.advance(misread.pk) == "rejected"
    assert smtp.count() == 0

    make_order("1044", fee_cents=1250)
    message = Message.objects.get()
    right = sort(message, colleague, orders=["1044"], reason=policy.LATE_DELIVERY).opened
    decide(advance_to_review(right), manager)
    assert runner.advance(right.pk) == "refunded"
    (told,) = smtp.delivered
    assert told.to == ["ana@example.com"] and "1044" in told.subject
    assert "We have started a refund of $12.50" in told.body and "cannot refund" not in told.body


def test_sending_back_needs_a_word_on_what_was_misread(misread, manager):
    with pytest.raises(sorting.SortingError, match="Say what was misread"):
        sorting.message_send_back(ticket=misread, why="  ", by=manager)
    assert not Decision.objects.exists()
    assert Message.objects.get().status == Message.Status.OPENED


def test_sending_back_is_for_whoever_may_decide_the_review(misread, agent, colleague):
    # A damaged item is a manager's review: an agent may not end it, so nothing moves.
    with pytest.raises(PermissionDenied):
        sorting.message_send_back(ticket=misread, why="wrong order", by=colleague)
    assert not Decision.objects.exists()
    assert Message.objects.get().status == Message.Status.OPENED


def test_a_ticket_opened_by_number_has_no_message_to_send_back(
    transactional_db, agent, manager, late_order
):
    ticket = advance_to_review(services.ticket_open(order_number="1042", opened_by=agent))
    with pytest.raises(sorting.SortingError, match="not opened from a customer's message"):
        sorting.message_send_back(ticket=ticket, why="misread", by=manager)
    assert not Decision.objects.exists()
