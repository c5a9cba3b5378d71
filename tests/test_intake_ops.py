"""What the intake could not finish, in front of admins: messages it gave up on (ops' Failed
page, with a Retry that hands them back) and acknowledgments never delivered (ops' Undelivered
page and Django admin, with a Resend). Nothing the intake gives up on is dropped silently."""

from __future__ import annotations

import socket

import pytest
from django.core import mail as django_mail
from django.urls import reverse
from django.utils import timezone

from intake import workflow
from intake.models import Message, MessageEvent
from intake.services import message_receive, message_retry
from refunds import enqueue
from refunds.models import Email, Ticket
from tests.conftest import helpdesk, make_order

LATE = "Hi, my order #1042 came almost a week late, can I get the delivery charge back? Ana"


@pytest.fixture(autouse=True)
def sent(monkeypatch) -> list[tuple[str, int]]:
    """Tasks asked of the broker (none is running here: the test runs the intake itself)."""
    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(enqueue, "send", lambda name, pk: asked.append((name, pk)) or True)
    return asked


@pytest.fixture
def ana(transactional_db):
    return make_order("1042")


def receive(body: str = LATE, key: str = "m1", subject: str = "Late parcel") -> Message:
    message, _ = message_receive(
        channel="api",
        brought_by=helpdesk(),
        key=key,
        sender="ana@example.com",
        sender_name="Ana Souza",
        subject=subject,
        body=body,
        received_at=timezone.now(),
        raw=body,
    )
    return message


def give_up(message: Message, settings) -> Message:
    """The attempt cap reached (as after workers that died on it every time)."""
    Message.objects.filter(pk=message.pk).update(
        attempts=settings.REFUNDS_MAX_ATTEMPTS, last_error="OperationalError: database is locked"
    )
    assert workflow.message_take(message.pk) == "needs_sorting"
    message.refresh_from_db()
    return message


@pytest.fixture
def no_mail_server(settings):
    """Mail to a port nobody listens on: every acknowledgment fails, fast."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", port, 1
    return settings


def test_a_message_given_up_on_is_listed_counted_and_retried_into_its_ticket(
    client, ana, admin_user, settings, sent
):
    message = give_up(receive(), settings)
    assert message.status == "needs_sorting" and not Ticket.objects.exists()
    client.force_login(admin_user)
    page = client.get(reverse("ops:failed")).content.decode()
    assert f'id="given-up-{message.pk}"' in page and "ana@example.com" in page
    assert "database is locked" in page and "Late parcel" in page
    assert reverse("reviews:message", args=[message.pk]) in page
    assert '<span class="count count-bad">1</span>' in page  # the navigation's count

    done = client.post(reverse("ops:message_retry", args=[message.pk]), follow=True)
    assert "back with the intake" in done.content.decode()
    message.refresh_from_db()
    assert (message.status, message.attempts, message.finished_at) == ("received", 0, None)
    assert sent[-1] == ("intake.tasks.take_message", message.pk)
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    assert message.status == "opened" and message.ticket == Ticket.objects.get()
    # The ticket it opened tells the customer (a person looks, or the outcome): not the intake.
    assert django_mail.outbox == [] and not Email.objects.exists()

    again = client.post(reverse("ops:message_retry", args=[message.pk]), follow=True)
    assert "handed back already" in again.content.decode()
    assert MessageEvent.objects.filter(message=message, action="retry").count() == 1
    assert "No message was given up on" in client.get(reverse("ops:failed")).content.decode()


def test_a_message_sorted_by_hand_after_the_give_up_keeps_what_the_person_chose(
    ana, admin_user, agent, settings
):
    from intake.sorting import message_sort

    message = give_up(receive(), settings)
    message_sort(message=message, order_numbers=["1042"], reason="late_delivery", by=agent)
    assert message_retry(message=message, by=admin_user)
    message.refresh_from_db()
    assert message.status == "opened" and message.handled_by == agent
    assert workflow.message_take(message.pk) == "finished"
    assert Ticket.objects.count() == 1  # the intake opened nothing more
    assert len(django_mail.outbox) == 1  # only the acknowledgment it owed


def open_already(order) -> Ticket:
    """A ticket open for the order: a message about it is added there, and the intake owes its
    sender the acknowledgment (a ticket the message opened tells the customer itself)."""
    from refunds import services

    return services.ticket_open(order_number=order.number)


def test_a_placed_message_whose_acknowledgment_kept_failing_is_listed_and_retried(
    client, ana, admin_user, no_mail_server
):
    open_already(ana)
    message = receive()
    for _ in range(no_mail_server.REFUNDS_MAX_ATTEMPTS):
        assert workflow.message_take(message.pk) == "error"
    assert workflow.message_take(message.pk) == "added"  # the cap: placed, so it stays placed
    message.refresh_from_db()
    assert message.status == "added" and message.finished_at and message.last_error
    client.force_login(admin_user)
    page = client.get(reverse("ops:failed")).content.decode()
    assert f'id="given-up-{message.pk}"' in page and "Added to an open ticket" in page

    no_mail_server.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    client.post(reverse("ops:message_retry", args=[message.pk]))
    assert workflow.message_take(message.pk) == "finished"
    assert Ticket.objects.count() == 1 and len(django_mail.outbox) == 1
    assert Email.objects.get().status == "sent"


def test_managers_see_given_up_messages_without_a_retry(client, ana, manager, settings):
    message = give_up(receive(), settings)
    client.force_login(manager)
    page = client.get(reverse("ops:failed")).content.decode()
    assert f'id="given-up-{message.pk}"' in page and "Retry</button>" not in page
    assert client.post(reverse("ops:message_retry", args=[message.pk])).status_code == 403
    message.refresh_from_db()
    assert message.finished_at is not None


def test_only_admins_hand_a_message_back(ana, agent, settings):
    from django.core.exceptions import PermissionDenied

    message = give_up(receive(), settings)
    with pytest.raises(PermissionDenied):
        message_retry(message=message, by=agent)


# --- acknowledgments not delivered -------------------------------------------------------------
NOT_REFUND = "Hello, I moved last month: please send my future orders to 12 Elm Street. Ana"


@pytest.fixture
def resend_here(monkeypatch):
    """The resend task, run here on commit instead of by a worker."""
    from django.db import transaction

    from refunds import mail

    monkeypatch.setattr(
        enqueue,
        "resend_on_commit",
        lambda email_id: transaction.on_commit(lambda: mail.resend(email_id)),
    )


def test_an_acknowledgment_of_no_ticket_never_delivered_is_listed_and_resent_once(
    client, ana, admin_user, no_mail_server, resend_here, django_capture_on_commit_callbacks
):
    no_mail_server.REFUNDS_MAX_ATTEMPTS = 1
    message = receive(NOT_REFUND, subject="New address")
    assert workflow.message_take(message.pk) == "error"
    email = Email.objects.get()
    assert email.ticket is None and email.key == message.ack_key and email.status != "sent"
    client.force_login(admin_user)
    # The intake still owns it (it tries again): not listed, and a Resend says why not.
    page = client.get(reverse("ops:undelivered")).content.decode()
    assert "Every email was delivered" in page
    refused = client.post(reverse("ops:resend", args=[email.pk]), follow=True)
    assert "still working on this message" in refused.content.decode()

    assert workflow.message_take(message.pk) == "needs_sorting"  # the cap: it gives up
    page = client.get(reverse("ops:undelivered")).content.decode()
    assert f'id="email-{email.pk}"' in page and '<span class="count count-warn">1</span>' in page
    assert f"Acknowledgment of message {message.pk} from ana@example.com" in page
    assert reverse("reviews:message", args=[message.pk]) in page and "Resend</button>" in page
    admin_list = client.get(reverse("admin:refunds_email_changelist")).content.decode()
    assert reverse("reviews:message", args=[message.pk]) in admin_list

    no_mail_server.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    url = reverse("ops:resend", args=[email.pk])
    with django_capture_on_commit_callbacks(execute=True):
        client.post(url)
    with django_capture_on_commit_callbacks(execute=True):
        second = client.post(url, follow=True)
    assert "already delivered" in second.content.decode()
    assert [m.to for m in django_mail.outbox] == [["ana@example.com"]]
    email.refresh_from_db()
    assert email.status == "sent"
    assert MessageEvent.objects.filter(message=message, action="resend").count() == 1
    assert "Every email was delivered" in client.get(reverse("ops:undelivered")).content.decode()


def test_an_acknowledgment_of_a_ticket_still_in_review_is_listed_once_the_intake_gave_up(
    client, ana, admin_user, no_mail_server
):
    no_mail_server.REFUNDS_MAX_ATTEMPTS = 1
    open_already(ana)
    message = receive()
    assert workflow.message_take(message.pk) == "error"
    assert workflow.message_take(message.pk) == "added"
    email = Email.objects.get()
    assert email.ticket is not None and not email.ticket.is_final
    client.force_login(admin_user)
    page = client.get(reverse("ops:undelivered")).content.decode()
    assert f'id="email-{email.pk}"' in page
    assert f"Acknowledgment of message {message.pk}" in page
    assert reverse("ops:history", args=[email.ticket.pk]) in page
