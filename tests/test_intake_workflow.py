"""The intake workflow in-process: where a message goes, once. (Real workers: test_intake_crash.)"""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import timedelta

import pytest
from django.core import mail as django_mail
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from devtools import faults
from intake import reader, steps, workflow
from intake.models import Message
from intake.services import message_receive, messages_recover
from refunds import enqueue, persistence, services
from refunds import lease as leases
from refunds.flow.state import TICKET_TELLS
from refunds.models import AuditEvent, Email, Ticket
from reviews.trail import audit_words
from tests.conftest import helpdesk, make_order

LATE = "Hi, my order #{n} came almost a week late, can I get the delivery charge back? Ana"


@pytest.fixture(autouse=True)
def sent(monkeypatch) -> list[tuple[str, int]]:
    """Tasks asked of the broker (none is running here: the test runs the intake itself)."""
    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(enqueue, "send", lambda name, pk: asked.append((name, pk)) or True)
    return asked


@pytest.fixture
def ana(transactional_db):
    return make_order("1042")


def receive(
    body: str, *, sender: str = "ana@example.com", key: str = "m1", subject: str = "Refund"
):
    message, _ = message_receive(
        channel="api",
        brought_by=helpdesk(),
        key=key,
        sender=sender,
        sender_name="Ana Souza",
        subject=subject,
        body=body,
        received_at=timezone.now(),
        raw=body,
    )
    return message


def take(message: Message) -> Message:
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    return message


def acks() -> list[str]:
    return [m.to[0] for m in django_mail.outbox]


def told(ticket: Ticket) -> str:
    """The email the ticket the message opened sends its customer on its way to a review (the
    intake leaves telling them to it: refunds/flow/nodes/messages.received)."""
    from refunds import runner

    before = len(django_mail.outbox)
    assert runner.advance(ticket.pk) == "awaiting_review"
    (email,) = django_mail.outbox[before:]
    return email.body


def test_an_email_cut_for_reading_opens_its_ticket_and_the_pages_say_it_was_cut(
    ana, settings, client, agent
):
    settings.INTAKE_MAX_CHARS = 200
    body = LATE.format(n=1042) + "\n" + "and more words " * 100
    message, _ = message_receive(
        channel="email",
        key="<long@mail.example.com>",
        sender="ana@example.com",
        subject="Late",
        body=body,
        received_at=timezone.now(),
        raw=body,
    )
    message = take(message)
    assert message.status == "opened" and message.ticket.reading["orders"] == ["1042"]
    client.force_login(agent)
    said = f"This message was cut to the first 200 characters for reading (it has {len(body):,})"
    ticket_page = client.get(reverse("reviews:ticket", args=[message.ticket.pk]))
    assert said in ticket_page.content.decode()
    assert said in client.get(reverse("reviews:message", args=[message.pk])).content.decode()


def test_a_message_naming_its_order_opens_one_ticket_with_the_reading_and_is_acknowledged(ana):
    message = take(receive(LATE.format(n=1042)))
    ticket = Ticket.objects.get()
    assert message.status == "opened" and message.ticket == ticket
    assert ticket.order == ana and ticket.reason == "late_delivery"
    assert ticket.reading["orders"] == ["1042"]
    assert message.reading | {TICKET_TELLS: True} == ticket.reading
    assert acks() == []  # the ticket tells the customer: a person looks, or the outcome alone
    assert "We have opened a refund request for order 1042." in told(ticket)
    assert acks() == ["ana@example.com"]
    email = Email.objects.get()
    assert email.key == f"{ticket.thread_id}:received" and email.status == "sent"
    assert email.ticket == ticket
    assert AuditEvent.objects.filter(ticket=ticket, seen__message_id=message.pk).count() == 1


def test_a_message_taken_again_opens_nothing_and_sends_nothing(ana):
    message = take(receive(LATE.format(n=1042)))
    assert workflow.message_take(message.pk) == "busy or finished"
    # Even a forced replay of the finished thread (its end lost, say) changes nothing.
    Message.objects.filter(pk=message.pk).update(finished_at=None)
    assert workflow.message_take(message.pk) == "finished"
    assert Ticket.objects.count() == 1 and Email.objects.count() == 0


def test_a_message_delivered_twice_is_one_message_and_one_intake(ana, sent):
    first = receive(LATE.format(n=1042))
    again = receive(LATE.format(n=1042))
    assert again.pk == first.pk and Message.objects.count() == 1
    assert sent == [("intake.tasks.take_message", first.pk)]


def test_a_message_naming_another_customers_order_opens_nothing_and_goes_to_sorting(ana):
    make_order("1043", name="Ben Okafor")
    message = take(receive(LATE.format(n=1043)))
    assert message.status == "needs_sorting"
    assert "1043 belongs to another customer" in message.sorting_reason
    assert Ticket.objects.count() == 0
    assert acks() == ["ana@example.com"]  # told a person will read it, never whose order it is
    assert "Ben" not in django_mail.outbox[0].body and "1043" not in django_mail.outbox[0].body


def test_a_message_naming_its_own_and_another_customers_order_opens_nothing(ana):
    make_order("1043", name="Ben Okafor")
    message = take(receive("Orders #1042 and #1043 both came late, refund the delivery please"))
    assert message.status == "needs_sorting" and Ticket.objects.count() == 0


def test_a_message_naming_two_orders_of_the_sender_opens_one_ticket_covering_both(ana):
    make_order("1044")
    message = take(receive("Orders #1042 and #1044 both came late, refund the delivery please"))
    ticket = Ticket.objects.get()
    assert message.status == "opened" and message.ticket == ticket
    assert ticket.order_numbers() == ["1042", "1044"]
    assert "a refund request for your orders 1042 and 1044" in told(ticket)


THREE = "My last three orders were all late: 1042, 1044 and 1047. Refund the delivery? Ana"


def test_a_message_naming_three_orders_opens_one_ticket_covering_the_three(ana):
    make_order("1044")
    make_order("1047")
    message = take(receive(THREE))
    ticket = Ticket.objects.get()
    assert ticket.order_numbers() == ["1042", "1044", "1047"] and ticket.order == ana
    assert message.status == "opened" and message.ticket == ticket
    assert ticket.reading["orders"] == ["1042", "1044", "1047"]
    note = AuditEvent.objects.get(ticket=ticket, seen__message_id=message.pk)
    assert note.seen["orders"] == ["1042", "1044", "1047"]
    assert audit_words(note) == (
        f"The desk noted: Opened from customer's api message {message.pk} (from ana@example.com)."
    )
    assert steps.placed(message)["tickets"] == [
        {"id": ticket.pk, "orders": ["1042", "1044", "1047"], "added": False}
    ]
    assert "We have opened a refund request for your orders 1042, 1044 and 1047." in told(ticket)


def test_one_of_three_orders_open_elsewhere_gets_the_message_and_the_other_two_one_ticket(ana):
    make_order("1044")
    make_order("1047")
    elsewhere = services.ticket_open(order_number="1044")
    message = take(receive(THREE))
    new = Ticket.objects.exclude(pk=elsewhere.pk).get()
    assert new.order_numbers() == ["1042", "1047"]
    assert elsewhere.order_numbers() == ["1044"]  # untouched: no second link to 1044
    assert message.status == "opened" and message.ticket == new  # the ticket opened first
    added = AuditEvent.objects.get(ticket=elsewhere, seen__message_id=message.pk)
    assert added.seen == {"message_id": message.pk, "added": True, "orders": ["1044"]}
    assert "added to this ticket" in added.note and "1044 and 1047" in added.note
    (ack,) = django_mail.outbox  # the intake's, about the ticket it added the message to
    assert "the refund request already open for order 1044" in ack.body
    assert "opened" not in ack.body  # the ticket it opened tells of itself
    assert "opened a refund request for your orders 1042 and 1047" in told(new)


def test_all_orders_open_on_one_ticket_add_the_message_there_once(ana):
    make_order("1044")
    already = services.ticket_open(order_numbers=["1042", "1044"])
    message = take(receive("Orders #1042 and #1044 both came late, refund the delivery please"))
    assert Ticket.objects.count() == 1 and message.status == "added"
    assert message.ticket == already
    (added,) = AuditEvent.objects.filter(seen__message_id=message.pk)
    assert added.ticket == already and added.seen["orders"] == ["1042", "1044"]
    assert "already open for your orders 1042 and 1044" in django_mail.outbox[0].body


def test_where_a_message_went_is_read_from_its_links_not_from_the_audit_log(ana):
    """placed() reads the message's MessageTicket links by their index, in one query: the audit
    table (200,000 rows on a busy desk) is not scanned inside open_ticket's transaction."""
    make_order("1044")
    make_order("1047")
    elsewhere = services.ticket_open(order_number="1044")
    message = take(receive(THREE))
    new = Ticket.objects.exclude(pk=elsewhere.pk).get()
    where = {
        "status": "opened",
        "tickets": [
            {"id": elsewhere.pk, "orders": ["1044"], "added": True},
            {"id": new.pk, "orders": ["1042", "1047"], "added": False},
        ],
    }
    assert steps.placed(message) == where
    AuditEvent.objects.all().delete()
    with CaptureQueriesContext(connection) as queries:
        assert steps.placed(message) == where
    assert len(queries) == 1 and "refunds_auditevent" not in queries[0]["sql"]


def test_orders_ticket_open_refuses_together_send_the_message_to_sorting(ana, monkeypatch):
    """The orders were the sender's when found; one changed hands before the ticket (a shop
    correcting an email): ticket_open refuses two customers' orders, nothing is opened and the
    message waits for a person with why."""
    make_order("1044")
    message = receive("Orders #1042 and #1044 both came late, refund the delivery please")
    real = steps.open_ticket

    def moved_first(item, read, found):
        type(ana).objects.filter(number="1044").update(customer_email="ben@example.com")
        return real(item, read, found)

    monkeypatch.setitem(workflow.TASKS, "open_ticket", moved_first)
    workflow._compiled.cache_clear()
    try:
        message = take(message)
    finally:
        workflow._compiled.cache_clear()
    assert message.status == "needs_sorting" and Ticket.objects.count() == 0
    assert message.sorting_reason == (
        "The ticket could not be opened: A ticket covers one customer's orders; 1042 is "
        "ana@example.com's, 1044 is ben@example.com's."
    )
    assert "ben" not in django_mail.outbox[0].body.lower()


def test_a_message_naming_no_order_is_placed_on_the_senders_only_recent_order(ana):
    Order = type(ana)
    Order.objects.filter(pk=ana.pk).update(promised_on=timezone.localdate())
    message = take(receive("My parcel came late, can I have the delivery charge back?"))
    assert message.status == "opened" and message.ticket.order == ana


def test_a_message_naming_no_order_from_a_sender_without_one_goes_to_sorting(ana):
    message = take(receive("My parcel came late, refund please", sender="zoe@example.com"))
    assert message.status == "needs_sorting" and "no order" in message.sorting_reason
    assert acks() == ["zoe@example.com"]


def test_a_message_naming_an_order_nobody_has_goes_to_sorting(ana):
    message = take(receive(LATE.format(n=9999)))
    assert message.status == "needs_sorting" and "no order 9999" in message.sorting_reason


def test_a_message_not_about_a_refund_goes_to_sorting_with_that_reason(ana):
    message = take(receive("Do you sell gift cards?", subject="A question"))
    assert message.status == "needs_sorting"
    assert message.sorting_reason.startswith("Not about a refund")
    assert Ticket.objects.count() == 0 and len(django_mail.outbox) == 1


def test_a_message_about_an_order_with_an_open_ticket_is_added_to_its_timeline(ana):
    open_one = services.ticket_open(order_number="1042")
    message = take(receive(LATE.format(n=1042)))
    assert message.status == "added" and message.ticket == open_one
    assert Ticket.objects.count() == 1
    note = AuditEvent.objects.get(ticket=open_one, seen__message_id=message.pk)
    assert "added to this ticket" in note.note and "week late" in note.note
    assert "already open for order 1042" in django_mail.outbox[0].body


def test_a_finished_task_is_not_run_again_when_the_thread_is_replayed(ana, settings, tmp_path):
    faults.install()
    plan = tmp_path / "plan.json"
    plan.write_text('{"*": {"point": "intake:open_ticket", "action": "error", "times": 1}}')
    settings.REFUNDS_CRASH_PLAN = str(plan)
    settings.WORKFLOW_TASK_WRAPPER = "devtools.faults.wrap_task"
    message = receive(LATE.format(n=1042))
    try:
        assert workflow.message_take(message.pk) == "error"
        Message.objects.filter(pk=message.pk).update(lease_expires_at=None)
        assert workflow.message_take(message.pk) == "finished"
    finally:
        workflow._compiled.cache_clear()
    # read and find_orders ran once; open_ticket twice (its first try failed before its effect)
    ran = [m.split("@")[1] for m in faults.fired(plan)]
    assert ran == ["intake:open_ticket"]  # the only point that fired, once
    assert Ticket.objects.count() == 1 and len(django_mail.outbox) == 0
    assert "refund request for order 1042" in told(Ticket.objects.get())
    assert len(django_mail.outbox) == 1


def test_a_replay_reads_the_message_once(ana, monkeypatch):
    calls = []
    real = reader.read
    monkeypatch.setattr(reader, "read", lambda **kw: calls.append(1) or real(**kw))
    message = receive(LATE.format(n=1042))
    item: steps.Item = {"message_id": message.pk, "thread_id": message.thread_id}
    lease = leases.grant_row(steps.TABLE, message.pk, thread_id=message.thread_id)
    assert lease is not None
    flow = workflow.workflow()
    config = {"configurable": {"thread_id": message.thread_id, "fence": lease.epoch}}
    broken = {"on": True}
    real_find = services.order_find

    def flaky(**kw):
        if broken["on"]:
            raise OperationalError("the database went away")
        return real_find(**kw)

    monkeypatch.setattr(services, "order_find", flaky)
    with pytest.raises(OperationalError):
        flow.invoke(item, config, context=steps.IntakeContext(lease=lease), durability="sync")
    broken["on"] = False
    flow.invoke(None, config, context=steps.IntakeContext(lease=lease), durability="sync")
    assert calls == [1] and Ticket.objects.count() == 1


def test_a_worker_whose_lease_was_taken_over_changes_nothing(ana):
    message = receive(LATE.format(n=1042))
    old = leases.grant_row(steps.TABLE, message.pk, thread_id=message.thread_id)
    assert old is not None
    Message.objects.filter(pk=message.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    new = leases.grant_row(steps.TABLE, message.pk, thread_id=message.thread_id)
    assert new is not None and new.epoch == old.epoch + 1
    item: steps.Item = {"message_id": message.pk, "thread_id": message.thread_id}
    read = {"reading": reader.read(sender="ana@example.com", subject="", body=LATE.format(n=1042))}
    found = {"orders": ["1042"]}
    with pytest.raises(Exception, match="lost"):
        _as_task(old, steps.open_ticket, item, {"reading": read["reading"].as_json()}, found)
    with pytest.raises(Exception, match="lost"):
        _as_task(old, steps.acknowledge, item, {"status": "opened", "tickets": []})
    assert Ticket.objects.count() == 0 and Email.objects.count() == 0
    assert len(django_mail.outbox) == 0


def _as_task(lease, fn, *args):
    """Run a task's body with `lease` in its runtime context, as the workflow would."""
    from langgraph.func import entrypoint

    @entrypoint(context_schema=steps.IntakeContext)
    def once(_: int):
        return fn(*args)

    return once.invoke(1, context=steps.IntakeContext(lease=lease))


def test_the_sweep_hands_on_an_unfinished_message_whose_lease_ran_out(ana, sent, settings):
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    message = receive(LATE.format(n=1042))
    sent.clear()
    lease = leases.grant_row(steps.TABLE, message.pk, thread_id=message.thread_id)
    assert lease is not None
    assert messages_recover() == []  # held: left to its worker
    Message.objects.filter(pk=message.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1),
        updated_at=timezone.now() - timedelta(seconds=1),
    )
    assert services.tickets_recover() == []  # the one sweep: no ticket, but the message
    assert sent == [("intake.tasks.take_message", message.pk)]
    take(message)
    sent.clear()
    assert messages_recover() == [] and sent == []


def test_a_message_that_fails_every_time_goes_to_sorting_after_the_attempts(ana, settings):
    settings.REFUNDS_MAX_ATTEMPTS = 2
    message = receive(LATE.format(n=1042))
    Message.objects.filter(pk=message.pk).update(attempts=2, last_error="Boom: it broke")
    assert workflow.message_take(message.pk) == "needs_sorting"
    message.refresh_from_db()
    assert message.status == "needs_sorting" and "after 2 attempts (Boom" in message.sorting_reason
    assert message.finished_at is not None


@pytest.mark.parametrize("point", ["intake:open_ticket:done", "intake:acknowledge:done"])
@pytest.mark.parametrize("orders", [1, 3])
def test_a_task_that_made_its_effect_and_lost_its_result_is_run_again_to_no_effect(
    ana, settings, tmp_path, point, orders
):
    """The effect committed, the result never reached the checkpoint (a database error in its
    place here; a kill in test_intake_crash.py): the task runs again and changes nothing."""
    faults.install()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"*": {"point": point, "action": "error", "times": 1}}))
    settings.REFUNDS_CRASH_PLAN = str(plan)
    settings.WORKFLOW_TASK_WRAPPER = "devtools.faults.wrap_task"
    if orders == 3:
        make_order("1044")
        make_order("1047")
    message = receive(LATE.format(n=1042) if orders == 1 else THREE)
    try:
        assert workflow.message_take(message.pk) == "error"
        Message.objects.filter(pk=message.pk).update(lease_expires_at=None)
        assert workflow.message_take(message.pk) == "finished"
    finally:
        workflow._compiled.cache_clear()
    message.refresh_from_db()
    assert message.status == "opened" and Ticket.objects.count() == 1
    assert len(Ticket.objects.get().order_numbers()) == orders
    assert AuditEvent.objects.filter(seen__message_id=message.pk).count() == 1
    assert len(django_mail.outbox) == 0  # the ticket tells: once, on its way to the review
    told(Ticket.objects.get())
    assert len(django_mail.outbox) == 1


def test_a_task_starts_only_once_the_result_before_it_is_saved(ana, tmp_path):
    """LangGraph saves a task's result in the background; the next task waits until it is in
    the checkpoint: an effect never runs while the result before it may still be lost (a
    checkpointer that takes its time to save shows the order)."""
    events: list[str] = []

    class SlowSaver(persistence.FencedSqliteSaver):
        def put_writes(self, config, writes, task_id, task_path=""):
            time.sleep(0.05)
            super().put_writes(config, writes, task_id, task_path)
            events.append("saved")

    def noting(name, fn):
        def started(item, *args):
            events.append(name)
            return fn(item, *args)

        return started

    saver = SlowSaver(sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False))
    saver.setup()
    flow = workflow.build_workflow(saver, noting)
    message = receive(LATE.format(n=1042))
    lease = leases.grant_row(steps.TABLE, message.pk, thread_id=message.thread_id)
    assert lease is not None
    item: steps.Item = {"message_id": message.pk, "thread_id": message.thread_id}
    config = {"configurable": {"thread_id": message.thread_id, "fence": lease.epoch}}
    flow.invoke(item, config, context=steps.IntakeContext(lease=lease), durability="sync")
    ran = [e for e in events if e != "saved"]
    assert ran == ["intake:read", "intake:find_orders", "intake:open_ticket", "intake:acknowledge"]
    for earlier, later in zip(ran, ran[1:], strict=False):
        between = events[events.index(earlier) + 1 : events.index(later)]
        assert "saved" in between, f"{later} started before {earlier}'s result was saved"


def test_a_message_begun_on_an_earlier_shape_loses_nothing(ana):
    """No message is lost across a change of the intake's shape, with no code kept for the old
    one: a thread paused under another graph (here a StateGraph, as the intake once was) reads
    as not begun to the entrypoint, which starts it again from the message; every task being
    idempotent by the message, it ends with one ticket and one acknowledgment."""
    from typing import TypedDict

    from langgraph.graph import START, StateGraph

    class Earlier(TypedDict, total=False):
        message_id: int
        thread_id: str
        read_result: dict

    def find_orders(state: Earlier) -> Earlier:
        raise OperationalError("the worker died here")

    graph = StateGraph(Earlier)
    graph.add_node("read", lambda state: {"read_result": {"reading": {}}})
    graph.add_node("find_orders", find_orders)
    graph.add_edge(START, "read")
    graph.add_edge("read", "find_orders")
    earlier = graph.compile(checkpointer=persistence.checkpointer())
    message = receive(LATE.format(n=1042))
    item = {"message_id": message.pk, "thread_id": message.thread_id}
    config = {"configurable": {"thread_id": message.thread_id}}
    with pytest.raises(OperationalError):
        earlier.invoke(item, config, durability="sync")
    assert earlier.get_state(config).next == ("find_orders",)
    now = workflow.workflow().get_state(config)
    assert not now.values and not now.next  # not begun, to the entrypoint
    message = take(message)
    assert message.status == "opened" and Ticket.objects.count() == 1
    told(Ticket.objects.get())
    assert acks() == ["ana@example.com"]


def test_a_model_that_names_another_customers_order_opens_no_ticket_for_it(ana):
    """The model reads; it never decides. LangChain's fake chat model answers with Ben's order,
    which the message does name (so the reader keeps it): finding the orders still refuses it."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from intake.reader import model

    make_order("2001", name="Ben Okafor")
    body = "My neighbour Ben said his order 2001 was late too. Refund the delivery please, Ana"
    answer = {
        "reason": "late_delivery",
        "orders": ["2001"],
        "amount_cents": None,
        "language": "en",
        "summary": "A late delivery; the customer asks for the delivery charge back.",
        "quotes": {"orders": "order 2001"},
    }
    chat = GenericFakeChatModel(messages=iter([AIMessage(content=json.dumps(answer))]))
    reading = model.read_with(
        chat,
        spec="fake:test",
        sender="ana@example.com",
        subject="Refund",
        body=body,
        timeout=5,
        attempts=1,
    )
    assert (reading.read_by, reading.orders) == ("fake:test", ["2001"])
    message = receive(body)
    item: steps.Item = {"message_id": message.pk, "thread_id": message.thread_id}
    found = steps.find_orders(item, {"reading": reading.as_json()})
    assert found == {
        "sorting": "Order 2001 belongs to another customer, not to ana@example.com; "
        "nothing was opened for it."
    }
    assert Ticket.objects.count() == 0


# --- what the customer hears, read at a real SMTP server --------------------------------------
def test_a_message_the_policy_declines_at_once_gets_one_email_the_outcome(transactional_db, smtp):
    make_order("1042", late=-3)  # arrived three days early
    message = take(receive(LATE.format(n=1042)))
    assert smtp.count() == 0  # nothing yet: the ticket's checks decide whether a person looks
    from refunds import runner

    assert runner.advance(message.ticket.pk) == "declined"
    (only,) = smtp.delivered
    assert only.to == ["ana@example.com"] and "order 1042" in only.subject
    assert "cannot give a refund" in only.body and "look at it" not in only.body


def test_a_message_a_person_reviews_gets_told_so_then_the_outcome_once_each(
    transactional_db, smtp, agent
):
    from refunds import runner
    from tests.reviewing import decide

    make_order("1042")
    message = take(receive(LATE.format(n=1042)))
    ticket = message.ticket
    assert runner.advance(ticket.pk) == "awaiting_review"
    (received,) = smtp.delivered
    assert "Someone on our team will look at it" in received.body
    ticket.refresh_from_db()
    decide(ticket, agent)
    assert runner.advance(ticket.pk) == "refunded"
    assert [d.key for d in smtp.delivered] == [
        f"{ticket.thread_id}:received",
        f"{ticket.thread_id}:email",
    ]
    assert "We have started a refund of $6.99" in smtp.delivered[1].body
