"""Forgetting a customer (ops/erasure.py, ops/forgetting.py): after an erasure, nothing the
desk keeps holds the customer's name, address or words: every table of the database, every
checkpoint and pending write (raw and as LangGraph reads them), the store, the attachments'
S3 bucket and the mail the desk sends later. The books keep amounts, dates, references and
decisions; the money guards still hold and a charge on an erased order is refused."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from email.message import EmailMessage

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from intake import sorting, workflow
from intake.models import Message
from ops import forgetting
from ops.erasure import erasure_request, erasure_take, erasures_recover, retention_request
from ops.models import Erasure
from refunds import enqueue, mail, money, persistence, runner, services
from refunds.flow.errors import ChargeRefused
from refunds.flow.nodes.common import customer_namespace
from refunds.models import AuditEvent, Charge, Decision, Email, Order, Ticket
from refunds.outbox import resendable
from refunds.services.errors import OrdersRefused, RefundError
from tests.conftest import make_order
from tests.reviewing import decide
from tests.test_attachments import JPEG, WEBHOOK_KEY, photo, post
from tests.test_checkpoint_encryption import keys  # noqa: F401 - a fixture, asked by name
from webhooks.models import Attempt, Delivery, Endpoint, Event

EMAIL = "ana@example.com"
NAME = "Ana Souza"
PHRASE = "turquoise teapot of my grandmother"
# As the store's namespace spells the address (periods escaped).
NEEDLES = (EMAIL, "Souza", PHRASE, customer_namespace(EMAIL)[1])


@pytest.fixture
def desk(settings, monkeypatch, smtp):
    """Signed inbound mail is taken; the tests run the threads themselves, no worker is asked.
    The checkpoints of earlier tests (they outlive Django's flush, as the store does) go first:
    the search counts this test's customer only."""
    no_earlier_threads()
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY}
    monkeypatch.setattr(enqueue, "send", lambda *args, **kwargs: True)
    return smtp


def no_earlier_threads() -> None:
    saver = persistence.checkpointer()
    for thread_id in {saved.config["configurable"]["thread_id"] for saved in saver.list(None)}:
        saver.delete_thread(thread_id)


def customer_writes(client, *, number: str = "1042", key: str = "<teapot@mail.example.com>"):
    email = EmailMessage()
    email["From"] = f"{NAME} <{EMAIL}>"
    email["To"] = "refunds@desk.example.com"
    email["Subject"] = f"Order {number} came late"
    email["Message-ID"] = key
    email.set_content(
        f"Hello, my order #{number} arrived a week late and the {PHRASE} missed her birthday. "
        "Could you refund the delivery charge? Ana Souza, 12 Rua Augusta, Lisboa"
    )
    email.add_attachment(
        photo(JPEG, seed="box"), maintype="image", subtype="jpeg", filename="box.jpg"
    )
    assert post(client, email.as_string()).status_code == 200
    message = Message.objects.get(key__contains=key)
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    return message


def refunded_ticket(client, reviewer) -> Ticket:
    message = customer_writes(client)
    ticket = message.ticket
    assert ticket is not None and runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    decide(ticket, reviewer)
    assert runner.advance(ticket.pk) == "refunded"
    return ticket


def helpdesk_answered(ticket: Ticket, answer: str) -> None:
    """A helpdesk's endpoint took the ticket's webhook and answered quoting the customer."""
    endpoint = Endpoint.objects.create(url="https://helpdesk.example.com/hook", secret="s" * 32)
    event = Event.objects.create(ticket=ticket, to_status="refunded", created_at=timezone.now())
    delivery = Delivery.objects.create(
        kind=Delivery.Kind.WEBHOOK, key="webhook:1:1", ticket=ticket, event=event, endpoint=endpoint
    )
    Attempt.objects.create(delivery=delivery, status_code=200, response_body=answer)


def everything_kept() -> Iterator[tuple[str, str]]:
    """(where, text) for every value the desk keeps: each table's every row and column, the
    checkpoint database's (SQLite keeps it in a file of its own), and every checkpoint and
    pending write as LangGraph reads them back."""
    yield from _tables(connection.cursor(), connection.introspection.table_names())
    url = persistence.checkpoint_url()
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            names = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            yield from _tables(conn.cursor(), names)
    for saved in persistence.checkpointer().list(None):
        yield (
            f"checkpoint {saved.config}",
            repr((saved.checkpoint, saved.metadata, saved.pending_writes)),
        )
    for item in persistence.store().search(("customers",), limit=10_000):
        yield f"store {item.namespace}", repr((item.namespace, item.key, item.value))


def _tables(cursor, names) -> Iterator[tuple[str, str]]:
    for table in names:
        cursor.execute(f'SELECT * FROM "{table}"')
        for row in cursor.fetchall():
            for value in row:
                if isinstance(value, bytes | memoryview):
                    value = bytes(value).decode("utf-8", errors="ignore")
                if value is not None:
                    yield table, str(value)


def holding(needles=NEEDLES) -> set[tuple[str, str]]:
    return {
        (where.split(" ")[0], needle)
        for where, text in everything_kept()
        for needle in needles
        if needle.lower() in text.lower()
    }


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_after_an_erasure_nothing_the_desk_keeps_holds_the_customers_name_address_or_words(
    transactional_db, client, desk, bucket, agent, late_order, request, encrypted
):
    if encrypted:  # checkpoints and the store under a key: the search reads them decrypted
        request.getfixturevalue("keys")(b"k" * 32)
    ticket = refunded_ticket(client, agent)
    message = Message.objects.get()
    assert len(bucket.keys()) == 1
    helpdesk_answered(ticket, f'{{"requester": "{NAME} <{EMAIL}>"}}')
    told = [m for m in desk.delivered if EMAIL in m.to]
    assert told and "Ana" in told[-1].body  # the customer was told, by name
    before = holding()
    # Found before, in each kind of store: the test looks where the data is.
    places = {where for where, _ in before}
    assert {"intake_message", "refunds_order", "refunds_email", "checkpoint", "store"} <= places
    assert "webhooks_attempt" in places
    assert {needle for _, needle in before} == set(NEEDLES)

    erasure = erasure_request(email=EMAIL.upper(), orders=["1042"], by="admin ada")
    assert erasure_take(erasure.pk) == "done"

    assert holding() == set()
    assert bucket.keys() == []  # the photo, at S3
    erasure.refresh_from_db()
    assert erasure.email == "" and erasure.status == "done"
    assert erasure.report["checkpoints"] == {"threads": 2}  # the ticket's and the message's
    assert erasure.report["files"] == {"files": 1}
    assert erasure.report["memory"] == {"items": 1}
    assert erasure.report["orders"] == {"orders": 1}
    # The books: the amount, the order and payment references, the decision and who took it.
    charge = Charge.objects.get()
    assert (charge.amount_cents, charge.status, charge.order.number) == (699, "succeeded", "1042")
    assert Decision.objects.get().reviewer == agent
    assert Ticket.objects.get().status == "refunded"
    order = Order.objects.get()
    assert order.customer_email == f"{erasure.pseudonym}@erased.invalid"
    assert order.erased_at is not None
    assert Message.objects.get(pk=message.pk).erased_at is not None
    # An audit entry per ticket, naming no one.
    entry = AuditEvent.objects.get(ticket=ticket, action=AuditEvent.Action.ERASE)
    assert entry.answer == {"erasure": erasure.pk, "kind": "customer"}


def test_nothing_is_sent_to_an_erased_customer_later(
    transactional_db,
    client,
    desk,
    bucket,
    agent,
    late_order,
):
    refunded_ticket(client, agent)
    erasure_take(erasure_request(email=EMAIL, by="admin ada").pk)
    sent = len(desk.delivered)
    # An admin's Resend: the undelivered list never offers it, and the outbox refuses it.
    email = Email.objects.filter(ticket__isnull=False).first()
    assert email is not None
    Email.objects.filter(pk=email.pk).update(status=Email.Status.FAILED)
    assert not Email.objects.filter(resendable(), pk=email.pk).exists()
    assert mail.resend(email.pk) is False
    assert len(desk.delivered) == sent


def test_an_erased_order_is_refunded_no_more_and_opens_no_ticket(
    transactional_db,
    client,
    desk,
    bucket,
    agent,
    late_order,
):
    ticket = refunded_ticket(client, agent)
    assert erasure_take(erasure_request(email=EMAIL, by="admin ada").pk) == "done"
    ticket.refresh_from_db()
    order = Order.objects.get(number="1042")
    assert order.erased_at is not None and ticket.status == "refunded"
    with pytest.raises(OrdersRefused, match="customer was erased on"):
        services.ticket_open(order_number="1042", opened_by=agent)
    # The ledger's own check, where the charge is reserved (the order row locked).
    with transaction.atomic(), pytest.raises(ChargeRefused, match="refunds or changes it no more"):
        money._read(ticket.pk, order.pk, ticket.lease_epoch, "erased:again", 100, [])


def test_an_erasure_waits_for_an_open_ticket_and_runs_once_it_has_ended(
    transactional_db,
    client,
    desk,
    bucket,
    agent,
    settings,
    late_order,
):
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    message = customer_writes(client)
    ticket = message.ticket
    assert ticket is not None and runner.advance(ticket.pk) == "awaiting_review"
    erasure = erasure_request(email=EMAIL, by="shop")
    assert erasure_take(erasure.pk) == "waiting"
    erasure.refresh_from_db()
    assert erasure.waiting_for == [ticket.pk] and erasure.email == EMAIL
    assert Order.objects.get().customer_email == EMAIL  # nothing erased under a running thread
    assert erasure_request(email=EMAIL, by="shop again").pk == erasure.pk  # one at a time
    assert erasures_recover() == []  # still open: not started again
    ticket.refresh_from_db()
    decide(ticket, agent, "reject", reason="Not late by our records.")
    assert runner.advance(ticket.pk) == "rejected"
    assert erasures_recover() == [erasure.pk]
    assert erasure_take(erasure.pk) == "done"
    assert holding() == set()


def test_a_request_that_names_another_customers_order_or_an_unknown_one_changes_nothing(db):
    make_order("1042")
    make_order("2001", name="Bruno Lima")
    with pytest.raises(Exception, match="not ana@example.com's"):
        erasure_request(email=EMAIL, orders=["1042", "2001"], by="admin")
    with pytest.raises(Exception, match="No order 9999"):
        erasure_request(email=EMAIL, orders=["9999"], by="admin")
    with pytest.raises(Exception, match="valid email"):
        erasure_request(email="not an address", by="admin")
    assert not Erasure.objects.exists()


def test_the_retention_job_forgets_tickets_ended_before_the_period_and_keeps_the_rest(
    transactional_db,
    client,
    desk,
    bucket,
    agent,
    settings,
    late_order,
):
    ticket = refunded_ticket(client, agent)
    other = make_order("2001", name="Bruno Lima")
    settings.REFUNDS_RETAIN_PERSONAL_DAYS = 30
    erasure = retention_request()
    assert erasure is not None and retention_request() is None  # one run at a time
    assert erasure_take(erasure.pk) == "done"
    assert Order.objects.get(pk=late_order.pk).erased_at is None  # ended today: kept
    Ticket.objects.filter(pk=ticket.pk).update(updated_at=ticket.updated_at.replace(year=2025))
    erasure = retention_request()
    assert erasure is not None and erasure_take(erasure.pk) == "done"
    assert holding() == set()
    assert Order.objects.get(pk=other.pk).customer_name == "Bruno Lima"  # no ticket: kept
    assert erasure.kind == "retention"


def test_each_store_is_erased_by_its_step():
    """The workflow runs every step, the orders last (the others read the email from them)."""
    assert list(forgetting.STEPS)[-1] == "orders"
    assert set(forgetting.STEPS) == {
        "checkpoints",
        "memory",
        "records",
        "files",
        "outbox",
        "messages",
        "tickets",
        "orders",
    }


def test_a_refund_the_processor_fails_after_the_erasure_gives_back_the_money_and_runs_nothing(
    transactional_db, client, desk, bucket, agent, late_order
):
    ticket = refunded_ticket(client, agent)
    erasure_take(erasure_request(email=EMAIL, by="admin ada").pk)
    sent = len(desk.delivered)
    Charge.objects.update(processor_status="failed")  # as Stripe's signed event would say
    runner.advance(ticket.pk)
    charge = Charge.objects.get()
    assert charge.handed_back_at is not None  # its money back in the order's balance
    assert Order.objects.get().refunded_cents() == 0
    assert len(desk.delivered) == sent  # no one to tell
    assert not list(persistence.checkpointer().list(persistence.thread_config(ticket.thread_id)))
    assert holding() == set()


def test_an_erased_ticket_shows_its_history_from_the_audit_and_forks_no_more(
    transactional_db, client, desk, bucket, agent, admin_user, late_order
):
    message = customer_writes(client)
    ticket = message.ticket
    assert ticket is not None and runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    decide(ticket, agent, "reject", reason="Not late by our records.")
    assert runner.advance(ticket.pk) == "rejected"
    erasure_take(erasure_request(email=EMAIL, by="admin ada").pk)
    client.force_login(admin_user)
    page = client.get(f"/tickets/{ticket.pk}/history/").content.decode()
    assert 'id="erased-note"' in page and "Souza" not in page
    ticket.refresh_from_db()
    with pytest.raises(RefundError, match="customer was erased on"):
        services.ticket_fork(ticket=ticket, amount_cents=500, reason="Wrong fee", by=admin_user)
    # The runner's own guard, where a forked or woken thread would begin anew from nothing.
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.RUNNING)
    runner.advance(ticket.pk)
    assert not list(persistence.checkpointer().list(persistence.thread_config(ticket.thread_id)))


def test_an_address_longer_than_the_column_is_refused_in_words(db):
    with pytest.raises(Exception, match="at most 254 characters"):
        erasure_request(email=f"{'a' * 64}@{'b' * 63}.{'c' * 63}.{'d' * 63}.com", by="admin")
    assert not Erasure.objects.exists()


def test_the_retention_job_keeps_only_the_last_checkpoint_of_threads_finished_long_ago(
    transactional_db, client, desk, bucket, agent, settings, late_order
):
    from ops.models import PrunedThread
    from ops.tasks import retention

    ticket = refunded_ticket(client, agent)
    settings.REFUNDS_RETAIN_PERSONAL_DAYS = 0  # personal data kept: only the pruning runs
    settings.REFUNDS_RETAIN_CHECKPOINTS_DAYS = 30
    config = persistence.thread_config(ticket.thread_id)
    assert len(list(persistence.checkpointer().list(config))) > 1
    retention()
    assert len(list(persistence.checkpointer().list(config))) > 1  # finished today: kept
    Ticket.objects.filter(pk=ticket.pk).update(updated_at=ticket.updated_at.replace(year=2025))
    assert retention() is None  # no erasure started
    assert len(list(persistence.checkpointer().list(config))) == 1
    assert PrunedThread.objects.get(ticket=ticket).checkpoints_removed > 0
    assert not Erasure.objects.exists()


def test_a_ticket_the_customer_wrote_to_about_another_addresss_order_loses_their_words(
    transactional_db, client, desk, bucket, agent, colleague
):
    """Ana writes about her husband's order (his address on it): her words and her ticket's
    threads go with her; his name and address stay on his order."""
    make_order("1042", name="Rui Souza")
    message = customer_writes(client)
    assert message.status == "needs_sorting"  # not the order's customer: a person sorts it
    sorting.message_sort(
        message=message,
        order_numbers=["1042"],
        reason="late_delivery",
        by=colleague,
        other_customer_ok=True,
    )
    ticket = Message.objects.get(pk=message.pk).ticket
    assert ticket is not None and runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    decide(ticket, agent, "reject", reason="Not late by our records.")
    assert runner.advance(ticket.pk) == "rejected"
    # The ticket quotes her: the sentence the reader read the reason from.
    words = (EMAIL, PHRASE, "Could you refund the delivery charge")
    assert ("refunds_ticket", words[2]) in holding(words)
    erasure_take(erasure_request(email=EMAIL, by="admin ada").pk)
    assert holding(words) == set()
    assert Order.objects.get().customer_email == "rui@example.com"


def test_an_erasure_waits_for_mail_still_to_go_to_the_customer(
    transactional_db, client, desk, bucket, agent, settings, late_order
):
    """Refunded, its confirmation not yet taken by the mail server (the outbox retries it): the
    customer is told first, then forgotten."""
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    ticket = refunded_ticket(client, agent)
    unsent = Email.objects.filter(ticket=ticket).first()
    assert unsent is not None
    Email.objects.filter(pk=unsent.pk).update(status=Email.Status.PENDING)
    erasure = erasure_request(email=EMAIL, by="admin ada")
    assert erasure_take(erasure.pk) == "waiting"
    assert Email.objects.get(pk=unsent.pk).to == EMAIL
    assert erasures_recover() == []
    Email.objects.filter(pk=unsent.pk).update(status=Email.Status.SENT)
    assert erasures_recover() == [erasure.pk]
    assert erasure_take(erasure.pk) == "done"


def _taken_over_before_finish(name: str, fn):
    """WORKFLOW_TASK_WRAPPER: a successor takes the erasure over just before its last task. The
    worker's lease still believes it holds: only the fenced UPDATE stands in the way."""

    def task(item, *args):
        if name == "erase:finish":
            Erasure.objects.filter(pk=item["erasure_id"]).update(lease_epoch=F("lease_epoch") + 1)
        return fn(item, *args)

    return task


def test_an_erasure_taken_over_before_its_last_task_records_nothing_as_done(
    transactional_db, client, desk, bucket, agent, settings, late_order
):
    refunded_ticket(client, agent)
    settings.WORKFLOW_TASK_WRAPPER = "tests.test_erasure._taken_over_before_finish"
    erasure = erasure_request(email=EMAIL, by="admin ada")
    assert erasure_take(erasure.pk) == "stopped early"
    erasure.refresh_from_db()
    assert (erasure.status, erasure.report, erasure.email) == ("running", {}, EMAIL)
