"""The outbox (refunds/mail.py, refunds/outbox.py): claimed with the run's epoch before the
mail server is called, sent once, never by a worker that lost its epoch; a Resend outside any
run, once. Counted in Django's own outbox (locmem) here; with a real SMTP server in
test_crash.py."""

from __future__ import annotations

import smtplib
from datetime import timedelta

import pytest
from django.core import mail as django_mail
from django.db.models import F
from django.utils import timezone
from langgraph.errors import GraphDrained

from refunds import lease as leases
from refunds import mail, outbox, signals
from refunds.flow.errors import EffectBusy, MailRefused, MailRetryable
from refunds.models import Email, Ticket
from tests.conftest import free_elsewhere, held_elsewhere


@pytest.fixture
def ticket(db, late_order) -> Ticket:
    return Ticket.objects.create(thread_id="refund-1042-mail", order=late_order)


def send(ticket: Ticket, lease: leases.Lease, key: str = "refund-1042-mail:email") -> None:
    mail.send_once(
        ticket_id=ticket.pk,
        lease=lease,
        key=key,
        to="ana@example.com",
        subject="Your refund",
        body="We refunded $6.99.",
    )


def test_it_sends_once_and_a_repeat_sends_nothing(ticket):
    lease = leases.grant(ticket)
    send(ticket, lease)
    send(ticket, lease)
    assert len(django_mail.outbox) == 1
    message = django_mail.outbox[0]
    assert message.extra_headers["X-Refund-Key"] == "refund-1042-mail:email"
    assert message.extra_headers["Message-ID"] == mail.message_id("refund-1042-mail:email")
    row = Email.objects.get()
    assert (row.status, row.claimed_by, row.attempts) == ("sent", f"epoch:{lease.epoch}", 1)


def test_a_worker_whose_epoch_was_taken_over_never_sends(ticket):
    lease = leases.grant(ticket)  # still fresh here: only the database knows it was taken over
    Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=F("lease_epoch") + 1)
    with pytest.raises(GraphDrained, match="lost"):
        send(ticket, lease)
    assert django_mail.outbox == []
    assert not Email.objects.exclude(status="pending").exists()  # nothing claimed, or sent


def test_a_worker_whose_epoch_was_taken_over_never_claims_a_row_already_written(ticket):
    """The claim's UPDATE path (the row is there, pending, from an earlier try) holds the lease
    check too, not only its INSERT: a worker that lost its epoch takes no claim on it."""
    key = "refund-1042-mail:email"
    Email.objects.create(key=key, ticket=ticket, to="ana@example.com", subject="s", body="b")
    lease = leases.grant(ticket)
    Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=F("lease_epoch") + 1)
    with pytest.raises(GraphDrained, match="lost"):
        send(ticket, lease, key)
    assert django_mail.outbox == []
    row = Email.objects.get(key=key)
    assert (row.status, row.claimed_by, row.attempts) == ("pending", "", 0)


@pytest.mark.parametrize("path", ["sent, then sent again", "epoch taken over", "refused"])
def test_every_way_out_of_a_send_gives_its_effect_lock_back(ticket, settings, path):
    """The lock is taken in the outbox claim and given back with the "sent" mark on PostgreSQL;
    a way out that kept it would leave the message busy for every other worker."""
    lease = leases.grant(ticket)
    if path == "sent, then sent again":
        send(ticket, lease)
        send(ticket, lease)
    elif path == "epoch taken over":
        Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=F("lease_epoch") + 1)
        with pytest.raises(GraphDrained):
            send(ticket, lease)
    else:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens: refused
        with pytest.raises(MailRetryable):
            send(ticket, lease)
    assert free_elsewhere("refund-1042-mail:email")


def test_a_message_another_process_is_sending_is_left_to_it(transactional_db, late_order):
    ticket = Ticket.objects.create(thread_id="refund-1042-mail", order=late_order)
    with held_elsewhere("refund-1042-mail:email"):
        with pytest.raises(EffectBusy):
            send(ticket, leases.grant(ticket))
    assert django_mail.outbox == []


def test_a_claim_by_a_sender_that_died_is_taken_over_by_the_next_epoch(ticket):
    first = leases.grant(ticket)
    Email.objects.create(
        ticket=ticket,
        key="refund-1042-mail:email",
        to="ana@example.com",
        subject="Your refund",
        body="...",
        status="sending",
        claimed_by=f"epoch:{first.epoch}",
        claimed_at=timezone.now() - outbox.send_window() - timedelta(seconds=1),
    )  # the first worker died after its claim; its lock went with it
    Ticket.objects.filter(pk=ticket.pk).update(lease_expires_at=None)
    send(ticket, leases.grant(ticket))
    assert len(django_mail.outbox) == 1 and Email.objects.get().status == "sent"


@pytest.mark.parametrize(
    ("error", "kind", "unknown"),
    [
        (smtplib.SMTPDataError(451, b"try again later"), MailRetryable, False),
        (smtplib.SMTPServerDisconnected("gone"), MailRetryable, True),  # after handing it over
        (ConnectionRefusedError(), MailRetryable, False),
        (TimeoutError(), MailRetryable, True),
        (smtplib.SMTPDataError(554, b"rejected"), MailRefused, False),
        (
            smtplib.SMTPRecipientsRefused({"ana@example.com": (550, b"no such user")}),
            MailRefused,
            False,
        ),
    ],
)
def test_a_mail_server_failure_is_classified_and_the_row_stays_unsent(
    ticket, monkeypatch, error, kind, unknown
):
    def fail(self, *args, **kwargs):
        raise error

    monkeypatch.setattr("django.core.mail.backends.locmem.EmailBackend.send_messages", fail)
    with pytest.raises(kind):
        send(ticket, leases.grant(ticket))
    row = Email.objects.get()
    assert row.status == "pending" and row.last_error and row.claimed_by == ""
    assert (row.outcome_unknown_at is not None) is unknown


def test_a_bug_in_sending_is_not_mistaken_for_a_mail_server_answer(ticket, monkeypatch):
    def fail(self, *args, **kwargs):
        raise KeyError("to")

    monkeypatch.setattr("django.core.mail.backends.locmem.EmailBackend.send_messages", fail)
    with pytest.raises(KeyError):
        send(ticket, leases.grant(ticket))


def test_resend_delivers_an_undelivered_email_of_a_final_ticket_once(ticket):
    Ticket.objects.filter(pk=ticket.pk).update(status="refunded")
    row = Email.objects.create(
        ticket=ticket, key="refund-1042-mail:email", to="a@example.com", subject="s", body="b"
    )
    assert mail.resend(row.pk) is True
    assert mail.resend(row.pk) is True
    assert len(django_mail.outbox) == 1


def test_resend_never_sends_for_a_ticket_that_is_still_running(ticket):
    row = Email.objects.create(
        ticket=ticket, key="refund-1042-mail:email", to="a@example.com", subject="s", body="b"
    )
    assert mail.resend(row.pk) is False
    assert django_mail.outbox == []


def test_on_postgresql_a_young_claim_is_left_to_its_sender_even_with_its_lock_free(ticket):
    """A blip drops PostgreSQL's advisory lock while its holder may still be talking to the mail
    server: a claim younger than the send window waits."""
    if outbox.send_window() == timedelta(0):
        pytest.skip("on SQLite a free file lock means its holder is gone")
    Email.objects.create(
        ticket=ticket,
        key="refund-1042-mail:email",
        to="ana@example.com",
        subject="Your refund",
        body="...",
        status="sending",
        claimed_by="epoch:0",
        claimed_at=timezone.now(),
    )
    with pytest.raises(EffectBusy):
        send(ticket, leases.grant(ticket))
    assert django_mail.outbox == []


def test_on_postgresql_a_resend_leaves_a_young_claim_to_its_sender_even_with_its_lock_free(
    ticket,
):
    """The Resend's claim is the outbox's compare-and-set (core/outbox.py): a claim younger than
    the send window is its sender's, whatever the lock says."""
    if outbox.send_window() == timedelta(0):
        pytest.skip("on SQLite a free file lock means its holder is gone")
    Ticket.objects.filter(pk=ticket.pk).update(status="refunded")
    row = Email.objects.create(
        ticket=ticket,
        key="refund-1042-mail:email",
        to="ana@example.com",
        subject="Your refund",
        body="...",
        status="sending",
        claimed_by="epoch:0",
        claimed_at=timezone.now(),
    )
    assert mail.resend(row.pk) is False
    assert django_mail.outbox == []
    assert Email.objects.get().claimed_by == "epoch:0"


def test_through_a_real_smtp_server_the_message_is_marked_sent_once_accepted(ticket, smtp):
    lease = leases.grant(ticket)
    send(ticket, lease)
    send(ticket, lease)  # a re-run of the node: the row says sent, nothing goes out
    assert smtp.keys() == {"refund-1042-mail:email": 1}
    assert smtp.delivered[0].message_id == mail.message_id("refund-1042-mail:email")
    assert Email.objects.get().status == "sent"


def test_a_message_id_is_the_same_for_its_key_and_names_neither_thread_nor_order(settings):
    """A question's Message-ID, named in a reply's References, finds the question: nobody may
    work it out from a ticket's thread id (its order number) to forge a reply."""
    key = "refund-1042-mail:ask:7"
    first = mail.message_id(key)
    assert first == mail.message_id(key)  # every attempt of one email: one id
    assert first.endswith("@refund-desk>") and "1042" not in first and "ask" not in first
    assert first != mail.message_id("refund-1042-mail:ask:8")
    settings.SECRET_KEY = "another-secret-" * 4
    assert mail.message_id(key) != first  # not a function of the key alone


@pytest.mark.parametrize(("code", "kind"), [(451, MailRetryable), (550, MailRefused)])
def test_a_refusal_at_the_end_of_the_message_rolls_the_mark_back(ticket, smtp, code, kind):
    smtp.refuse(1, code=code)
    with pytest.raises(kind):
        send(ticket, leases.grant(ticket))
    row = Email.objects.get()
    assert row.status == "pending" and str(code) in row.last_error
    assert smtp.count() == 0


def test_a_sender_whose_claim_was_taken_during_the_conversation_never_ends_the_message(
    ticket, smtp, monkeypatch
):
    """The final "." goes out only while the row is still this sender's: a claim taken over
    mid-conversation (a successor after the send window) leaves nothing at the server."""

    def taken_over(key: str, event: str) -> None:
        if event == "connect":
            Email.objects.filter(key=key).update(claimed_by="epoch:999")

    observe_deliveries(monkeypatch, taken_over)
    with pytest.raises(EffectBusy):
        send(ticket, leases.grant(ticket))
    assert smtp.count() == 0
    assert Email.objects.get().status == "sending"  # still the successor's to send


# --- the two marks around the final ".": handed over, then sent --------------------------------
def dead_senders_row(ticket: Ticket, **fields) -> Email:
    """An outbox row whose sender handed the final "." over and stopped before the answer."""
    return Email.objects.create(
        ticket=ticket,
        key="refund-1042-mail:email",
        to="ana@example.com",
        subject="Your refund",
        body="...",
        status="sending",
        claimed_by="epoch:1",
        claimed_at=timezone.now() - outbox.send_window() - timedelta(seconds=1),
        handed_over_at=timezone.now() - timedelta(seconds=3),
        handed_over_by="epoch:1 on w1:4242",
        **fields,
    )


def test_nothing_is_held_while_the_mail_server_keeps_its_answer(
    transactional_db, late_order, smtp, monkeypatch
):
    """DESIGN 6c: no network wait inside a database transaction. While the server holds its
    answer to the final ".", another connection sees the committed handover mark and writes
    that very row at once (on SQLite: any write, the lock is the database's)."""
    import threading

    from django.db import connection

    ticket = Ticket.objects.create(thread_id="refund-1042-mail", order=late_order)
    smtp.slow(2.0)
    seen: dict = {}

    def elsewhere(key: str) -> None:
        try:
            with connection.cursor() as cursor:  # a short lock wait: a held lock fails here
                if connection.vendor == "sqlite":
                    cursor.execute("PRAGMA busy_timeout = 300")
                else:
                    cursor.execute("SET lock_timeout = 300")
            row = Email.objects.get(key=key)
            seen["row"] = (row.status, row.handed_over_by, row.handed_over_at is not None)
            seen["wrote"] = Email.objects.filter(key=key).update(last_error="")
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            seen["error"] = repr(exc)
        finally:
            connection.close()

    def on_handed_over(key: str, event: str) -> None:
        if event == "handed_over":
            reader = threading.Thread(target=elsewhere, args=(key,))
            reader.start()
            reader.join()

    observe_deliveries(monkeypatch, on_handed_over)
    lease = leases.grant(ticket)
    send(ticket, lease)
    assert "error" not in seen, seen
    status, by, at = seen["row"]
    assert (status, at, seen["wrote"]) == ("sending", True, 1)
    assert by.startswith(f"epoch:{lease.epoch} on ")
    row = Email.objects.get()
    assert (row.status, row.handed_over_at, row.outcome_unknown_at) == ("sent", None, None)
    assert smtp.count() == 1


def test_a_takeover_of_a_handover_without_an_answer_records_outcome_unknown(ticket, smtp):
    first = dead_senders_row(ticket)
    Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=1, lease_expires_at=None)
    lease = leases.grant(ticket)
    send(ticket, lease)  # the policy for the window: the next epoch sends it again
    row = Email.objects.get()
    assert row.status == "sent" and smtp.count() == 1
    assert (row.outcome_unknown_at, row.outcome_unknown_by) == (
        first.handed_over_at,
        "epoch:1 on w1:4242",
    )
    assert (row.handed_over_at, row.handed_over_by) == (None, "")


def test_a_resend_that_takes_over_a_handover_without_an_answer_records_outcome_unknown(
    ticket, smtp
):
    first = dead_senders_row(ticket)
    Ticket.objects.filter(pk=ticket.pk).update(status="refunded")
    assert mail.resend(first.pk) is True
    row = Email.objects.get()
    assert row.status == "sent" and smtp.count() == 1
    assert (row.outcome_unknown_at, row.outcome_unknown_by) == (
        first.handed_over_at,
        "epoch:1 on w1:4242",
    )


def test_an_answer_lost_after_the_handover_leaves_the_outcome_unknown(ticket, smtp, settings):
    """The server took the final "." and no answer came back within EMAIL_TIMEOUT: the message
    may be delivered. The row says so, and the retry (the node's policy) may send a copy."""
    settings.EMAIL_TIMEOUT = 0.5
    smtp.slow(3.0)
    lease = leases.grant(ticket)
    with pytest.raises(MailRetryable):
        send(ticket, lease)
    row = Email.objects.get()
    assert (row.status, row.claimed_by, row.handed_over_at) == ("pending", "", None)
    assert row.outcome_unknown_at is not None
    assert row.outcome_unknown_by.startswith(f"epoch:{lease.epoch} on ")


def test_a_refusal_of_the_message_is_an_answer_not_an_unknown_outcome(ticket, smtp):
    smtp.refuse(1, code=451)
    with pytest.raises(MailRetryable):
        send(ticket, leases.grant(ticket))
    row = Email.objects.get()
    assert (row.status, row.handed_over_at, row.outcome_unknown_at) == ("pending", None, None)


def test_a_worker_whose_epoch_was_taken_during_the_conversation_never_ends_the_message(
    ticket, smtp, monkeypatch
):
    def taken_over(key: str, event: str) -> None:
        if event == "connect":
            Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=F("lease_epoch") + 1)

    observe_deliveries(monkeypatch, taken_over)
    with pytest.raises(GraphDrained, match="lost"):
        send(ticket, leases.grant(ticket))
    assert smtp.count() == 0 and smtp.ended_for() == []
    assert Email.objects.get().handed_over_at is None


def test_an_answer_that_comes_after_a_takeover_is_recorded_if_the_successor_has_not_sent(
    ticket, smtp, monkeypatch
):
    """A sender stalled past the send window while the server held its answer; a successor took
    the row over (outcome unknown) but has not handed its copy over yet. The delivery is a fact:
    recorded, so the successor's handover fails and no second copy goes out."""

    def stalled_and_taken_over(key: str, event: str) -> None:
        if event == "handed_over":
            Email.objects.filter(key=key).update(
                claimed_by="epoch:999", claimed_at=timezone.now(), **outbox.unknown_fields()
            )

    observe_deliveries(monkeypatch, stalled_and_taken_over)
    send(ticket, leases.grant(ticket))
    row = Email.objects.get()
    assert row.status == "sent" and row.outcome_unknown_at is not None
    assert smtp.count() == 1


def observe_deliveries(monkeypatch, hook) -> None:
    """Call hook(key, event) at each step of a delivery, for this test only: the receiver goes
    into a copy of the signal's receivers that monkeypatch puts back at teardown."""

    def receiver(sender, *, key: str, event: str, **kwargs) -> None:
        hook(key, event)

    monkeypatch.setattr(signals.mail_delivery, "receivers", list(signals.mail_delivery.receivers))
    signals.mail_delivery.connect(receiver, weak=False)


def test_a_customers_cr_lf_never_reaches_a_header(ticket):
    lease = leases.grant(ticket)
    mail.send_once(
        ticket_id=ticket.pk,
        lease=lease,
        key="refund-1042-mail:ack",
        to="ana@example.com",
        subject="Re: Late\r\nBcc: x@evil.example\u2028X-Other: y",
        body="Thank you for writing to us.",
    )
    message = django_mail.outbox[0]
    assert message.subject == "Re: Late Bcc: x@evil.example X-Other: y"
    headers = message.message().as_string().split("\n\n")[0]
    assert "\nBcc:" not in headers and "\nX-Other:" not in headers
    assert Email.objects.get().status == "sent"
