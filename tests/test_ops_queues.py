"""The failed and undelivered queues: a Retry goes on under the lease from the last checkpoint,
a Resend delivers once; both counted in the admins' navigation."""

from __future__ import annotations

import pytest
from django.core import mail as django_mail
from django.urls import reverse

from refunds import enqueue, mail, runner, services
from refunds.models import Charge, Email, Ticket
from tests.reviewing import advance_to_review, decide


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # the tests advance by hand


@pytest.fixture
def failed(transactional_db, agent, admin_user, late_order) -> Ticket:
    """Approved, then the worker gave up before applying it (as after repeated crashes)."""
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    ticket = advance_to_review(ticket)
    decide(ticket, admin_user, "approve")
    Ticket.objects.filter(pk=ticket.pk).update(
        status="failed", attempts=6, last_error="OperationalError: database is locked"
    )
    return ticket


def test_a_failed_thread_is_listed_counted_and_retried_to_its_end(client, failed, admin_user):
    client.force_login(admin_user)
    page = client.get(reverse("ops:failed")).content.decode()
    assert "database is locked" in page and "step 3" in page and "Review by a person" in page
    assert '<span class="count count-bad">1</span>' in page  # the navigation's count
    done = client.post(reverse("ops:retry", args=[failed.pk]), follow=True)
    assert "back in line" in done.content.decode()
    failed.refresh_from_db()
    assert (failed.status, failed.attempts) == ("running", 0)
    assert runner.advance(failed.pk) == "refunded"
    assert Charge.objects.get().amount_cents == 699
    again = client.post(reverse("ops:retry", args=[failed.pk]), follow=True)
    assert "not failed any more" in again.content.decode()
    assert failed.audit_events.filter(action="retry").count() == 1


def test_managers_see_the_failed_queue_without_a_retry(client, failed, manager):
    client.force_login(manager)
    page = client.get(reverse("ops:failed")).content.decode()
    assert "database is locked" in page and "Retry</button>" not in page
    assert client.post(reverse("ops:retry", args=[failed.pk])).status_code == 403


def test_an_undelivered_email_is_listed_and_resent_once(
    client, db, admin_user, late_order, monkeypatch, django_capture_on_commit_callbacks
):
    from django.db import transaction

    # The resend task, run here on commit instead of by a worker.
    monkeypatch.setattr(
        enqueue,
        "resend_on_commit",
        lambda email_id: transaction.on_commit(lambda: mail.resend(email_id)),
    )
    ticket = Ticket.objects.create(thread_id="refund-1042-x", order=late_order, status="refunded")
    email = Email.objects.create(
        ticket=ticket,
        key="refund-1042-x:email",
        to="ana@example.com",
        subject="Your refund for order 1042",
        body="We refunded $6.99.",
        attempts=4,
        last_error="mail server unreachable",
    )
    client.force_login(admin_user)
    page = client.get(reverse("ops:undelivered")).content.decode()
    assert "mail server unreachable" in page and '<span class="count count-warn">1</span>' in page
    url = reverse("ops:resend", args=[email.pk])
    with django_capture_on_commit_callbacks(execute=True):
        client.post(url)
    with django_capture_on_commit_callbacks(execute=True):
        second = client.post(url, follow=True)
    assert "already delivered" in second.content.decode()
    assert len(django_mail.outbox) == 1
    email.refresh_from_db()
    assert email.status == "sent"
    assert "Every email was delivered" in client.get(reverse("ops:undelivered")).content.decode()


def test_an_undelivered_email_whose_outcome_is_unknown_says_when_and_by_whom(
    client, db, admin_user, manager, late_order
):
    """A takeover found the message handed to the mail server with no answer recorded: admins
    (and managers, who read the page) see that it may have reached the customer."""
    from datetime import UTC, datetime

    ticket = Ticket.objects.create(thread_id="refund-1042-x", order=late_order, status="refunded")
    Email.objects.create(
        ticket=ticket,
        key="refund-1042-x:email",
        to="ana@example.com",
        subject="Your refund for order 1042",
        body="We refunded $6.99.",
        attempts=2,
        last_error="the mail server could not be reached",
        outcome_unknown_at=datetime(2026, 12, 1, 14, 5, tzinfo=UTC),
        outcome_unknown_by="epoch:3 on worker-a:4242",
    )
    for user in (admin_user, manager):
        client.force_login(user)
        page = client.get(reverse("ops:undelivered")).content.decode()
        assert "Outcome unknown" in page
        assert "Dec 1, 2026, 14:05 UTC" in page and "epoch:3 on worker-a:4242" in page


@pytest.mark.parametrize("page", ["ops:failed", "ops:undelivered"])
def test_every_column_of_the_queues_has_a_header_a_screen_reader_says(client, admin_user, page):
    import re

    client.force_login(admin_user)
    html = client.get(reverse(page)).content.decode()
    headers = re.findall(r"<th>(.*?)</th>", html.split("<thead>")[1].split("</thead>")[0])
    assert headers and all(re.sub(r"<[^>]+>", "", h).strip() for h in headers), headers
    assert '<th><span class="sr-only">Action</span></th>' in html


def test_a_resend_while_the_broker_is_down_keeps_the_email_undelivered_and_answers_no_500(
    client, db, admin_user, late_order, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    from kombu.exceptions import OperationalError

    from config.celery_app import app

    def unreachable(*args, **kwargs):
        raise OperationalError("Error 111 connecting to the broker. Connection refused.")

    monkeypatch.setattr(app, "send_task", unreachable)  # on the app: Celery's pools outlive us
    ticket = Ticket.objects.create(thread_id="refund-1042-y", order=late_order, status="refunded")
    email = Email.objects.create(
        ticket=ticket, key="refund-1042-y:email", to="ana@example.com", subject="s", body="b"
    )
    client.force_login(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("ops:resend", args=[email.pk]))
    assert response.status_code == 302
    assert "could not enqueue refunds.tasks.resend_email" in caplog.text
    email.refresh_from_db()
    assert email.status == "pending"
    assert "ana@example.com" in client.get(reverse("ops:undelivered")).content.decode()
