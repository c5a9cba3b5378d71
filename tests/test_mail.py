"""The outbox (refunds/mail.py): claimed with the run's epoch before the mail server is called,
sent once, never by a worker that lost its epoch; a Resend outside any run, once. Counted in
Django's own outbox (locmem) here; with a real SMTP server in test_crash.py."""

from __future__ import annotations

import smtplib
from datetime import timedelta

import pytest
from django.core import mail as django_mail
from django.db.models import F
from django.utils import timezone
from langgraph.errors import GraphDrained

from refunds import lease as leases
from refunds import mail
from refunds.flow.errors import EffectBusy, MailRefused, MailRetryable
from refunds.models import Email, Ticket
from tests.conftest import held_elsewhere


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
    assert message.extra_headers["Message-ID"] == "<refund-1042-mail.email@refund-desk>"
    row = Email.objects.get()
    assert (row.status, row.claimed_by, row.attempts) == ("sent", f"epoch:{lease.epoch}", 1)


def test_a_worker_whose_epoch_was_taken_over_never_sends(ticket):
    lease = leases.grant(ticket)  # still fresh here: only the database knows it was taken over
    Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=F("lease_epoch") + 1)
    with pytest.raises(GraphDrained, match="lost"):
        send(ticket, lease)
    assert django_mail.outbox == []
    assert not Email.objects.exclude(status="pending").exists()  # nothing claimed, or sent


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
        claimed_at=timezone.now() - mail.send_window() - timedelta(seconds=1),
    )  # the first worker died after its claim; its lock went with it
    Ticket.objects.filter(pk=ticket.pk).update(lease_expires_at=None)
    send(ticket, leases.grant(ticket))
    assert len(django_mail.outbox) == 1 and Email.objects.get().status == "sent"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (smtplib.SMTPDataError(451, b"try again later"), MailRetryable),
        (smtplib.SMTPServerDisconnected("gone"), MailRetryable),
        (ConnectionRefusedError(), MailRetryable),
        (TimeoutError(), MailRetryable),
        (smtplib.SMTPDataError(554, b"rejected"), MailRefused),
        (smtplib.SMTPRecipientsRefused({"ana@example.com": (550, b"no such user")}), MailRefused),
    ],
)
def test_a_mail_server_failure_is_classified_and_the_row_stays_unsent(
    ticket, monkeypatch, error, kind
):
    def fail(self, *args, **kwargs):
        raise error

    monkeypatch.setattr("django.core.mail.backends.locmem.EmailBackend.send_messages", fail)
    with pytest.raises(kind):
        send(ticket, leases.grant(ticket))
    row = Email.objects.get()
    assert row.status == "pending" and row.last_error and row.claimed_by == ""


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
    if mail.send_window() == timedelta(0):
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


@pytest.fixture
def smtp(settings):
    from devtools.smtp_sink import SmtpSink

    sink = SmtpSink().start()
    for name, value in sink.env().items():
        setattr(settings, name, int(value) if name == "EMAIL_PORT" else value)
    yield sink
    sink.stop()


def test_through_a_real_smtp_server_the_message_is_marked_sent_once_accepted(ticket, smtp):
    lease = leases.grant(ticket)
    send(ticket, lease)
    send(ticket, lease)  # a re-run of the node: the row says sent, nothing goes out
    assert smtp.keys() == {"refund-1042-mail:email": 1}
    assert smtp.delivered[0].message_id == "<refund-1042-mail.email@refund-desk>"
    assert Email.objects.get().status == "sent"


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

    monkeypatch.setattr(mail, "delivery_hooks", [taken_over])
    with pytest.raises(EffectBusy):
        send(ticket, leases.grant(ticket))
    assert smtp.count() == 0
    assert Email.objects.get().status == "sending"  # still the successor's to send
