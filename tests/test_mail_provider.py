"""Mail through a provider (django-anymail): the outbox hands the message to the provider's API
with its key as metadata (and, where the API takes one, as the idempotency key); the provider's
signed tracking webhooks update the outbox row and feed the undelivered page."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail as django_mail
from django.urls import reverse

from devtools.smtp_sink import free_port
from refunds import lease as leases
from refunds import mail
from refunds.flow.errors import MailRefused, MailRetryable
from refunds.models import Email, Ticket

KEY = "refund-1042-provider:email"


@pytest.fixture
def ticket(db, late_order) -> Ticket:
    return Ticket.objects.create(thread_id="refund-1042-provider", order=late_order)


def send(ticket: Ticket, lease: leases.Lease) -> None:
    mail.send_once(
        ticket_id=ticket.pk,
        lease=lease,
        key=KEY,
        to="ana@example.com",
        subject="Your refund",
        body="We refunded $6.99.",
    )


# --- sending: anymail's test backend --------------------------------------------------------------
def test_through_a_provider_the_outbox_sends_once_with_its_key_as_metadata(ticket, settings):
    settings.EMAIL_BACKEND = "anymail.backends.test.EmailBackend"
    lease = leases.grant(ticket)

    send(ticket, lease)
    send(ticket, lease)

    assert len(django_mail.outbox) == 1
    assert django_mail.outbox[0].anymail_test_params["metadata"] == {"refund_key": KEY}
    row = Email.objects.get()
    assert (row.status, row.provider_message_id) == ("sent", "0")  # the test backend's id


# --- a provider over HTTP that keeps its idempotency keys, as Resend's API does -------------------
class FakeResend:
    """POST /emails: each request takes the message (counted in `delivered`) unless its
    Idempotency-Key was seen, then answers as told: "ok", "drop" (took it, no answer), or a
    status code (a 4xx takes nothing)."""

    def __init__(self) -> None:
        self.delivered: list[dict] = []
        self.keys_seen: list[str | None] = []
        self.answers: list[str] = []
        self._ids: dict[str, str] = {}
        self._lock = threading.Lock()
        self.port = free_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = self.headers.get("Idempotency-Key")
                with fake._lock:
                    answer = fake.answers.pop(0) if fake.answers else "ok"
                    fake.keys_seen.append(key)
                    if answer.isdigit() and int(answer) < 500:
                        message_id = None
                    elif key and key in fake._ids:
                        message_id = fake._ids[key]  # the first request's answer, sent again
                    else:
                        message_id = f"re_{len(fake.delivered) + 1}"
                        fake.delivered.append(body)
                        if key:
                            fake._ids[key] = message_id
                if answer == "drop":
                    self.connection.close()  # took it; the answer never leaves
                    return
                status = int(answer) if answer.isdigit() else 200
                out = json.dumps({"id": message_id} if status == 200 else {"message": "no"})
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out.encode())

        return Handler

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def resend(settings) -> Iterator[FakeResend]:
    fake = FakeResend()
    settings.EMAIL_BACKEND = "refunds.mailers.ResendBackend"
    settings.ANYMAIL = {
        "RESEND_API_KEY": "re_test",
        "RESEND_API_URL": f"http://127.0.0.1:{fake.port}/",
    }
    yield fake
    fake.stop()


def lose_the_answer_then_retry(ticket: Ticket, resend: FakeResend) -> Email:
    resend.answers = ["drop", "ok"]
    lease = leases.grant(ticket)
    with pytest.raises(MailRetryable):
        send(ticket, lease)
    row = Email.objects.get()
    assert row.status == "pending"  # handed over, no answer: it may have been delivered
    assert row.outcome_unknown_by.startswith(f"epoch:{lease.epoch} on ")
    send(ticket, lease)  # the retry after an unknown outcome
    return Email.objects.get()


def test_resend_gets_the_outbox_key_so_a_retry_after_a_lost_answer_delivers_once(ticket, resend):
    row = lose_the_answer_then_retry(ticket, resend)

    assert resend.keys_seen == [KEY, KEY]
    assert len(resend.delivered) == 1  # counted where it lands
    assert (row.status, row.provider_message_id) == ("sent", "re_1")
    assert row.outcome_unknown_at is not None  # what happened is kept all the same


def test_without_the_idempotency_key_the_same_retry_delivers_twice(ticket, resend, settings):
    settings.EMAIL_BACKEND = "anymail.backends.resend.EmailBackend"  # anymail's own, no key

    lose_the_answer_then_retry(ticket, resend)

    assert resend.keys_seen == [None, None]
    assert len(resend.delivered) == 2  # the window SMTP leaves open, and most providers too


def test_a_providers_4xx_is_a_refusal_and_nothing_was_handed_over(ticket, resend):
    resend.answers = ["422"]
    with pytest.raises(MailRefused, match="422"):
        send(ticket, leases.grant(ticket))

    row = Email.objects.get()
    assert (row.status, row.outcome_unknown_at, row.handed_over_at) == ("pending", None, None)
    assert resend.delivered == []


def test_a_rate_limited_send_took_nothing_so_it_is_retried_with_the_outcome_known(ticket, resend):
    resend.answers = ["429"]
    with pytest.raises(MailRetryable, match="429"):
        send(ticket, leases.grant(ticket))

    row = Email.objects.get()
    assert (row.status, row.outcome_unknown_at, row.handed_over_at) == ("pending", None, None)


def test_a_providers_5xx_may_have_taken_it_so_the_outcome_is_unknown(ticket, resend):
    resend.answers = ["503"]
    with pytest.raises(MailRetryable, match="did not take"):
        send(ticket, leases.grant(ticket))

    assert Email.objects.get().outcome_unknown_at is not None


# --- tracking: Mailgun's signed webhooks ----------------------------------------------------------
SIGNING_KEY = "mailgun-signing-key-for-tests"


@pytest.fixture
def sent(ticket, settings) -> Email:
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": SIGNING_KEY}
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.REFUNDED)
    return Email.objects.create(
        ticket=ticket,
        key=KEY,
        to="ana@example.com",
        subject="Your refund",
        body="...",
        status=Email.Status.SENT,
        provider_message_id="<20261201.abc@mg.example.com>",
    )


def mailgun_event(
    event: str,
    *,
    key: str | None = KEY,
    at: float | None = None,
    sign_with: str = SIGNING_KEY,
    signed_at: float | str | None = None,
    token: str = "",
    **data,
) -> str:
    """A tracking payload as Mailgun posts it: the event data (`at`: when it happened) and its
    HMAC-SHA256 signature over a time (`signed_at`, now by default) and a one-time token."""
    timestamp = signed_at if isinstance(signed_at, str) else str(int(signed_at or time.time()))
    token = token or uuid.uuid4().hex
    signature = hmac.new(sign_with.encode(), f"{timestamp}{token}".encode(), hashlib.sha256)
    return json.dumps(
        {
            "signature": {
                "timestamp": timestamp,
                "token": token,
                "signature": signature.hexdigest(),
            },
            "event-data": {
                "event": event,
                "timestamp": at or time.time(),
                "id": "evt-1",
                "recipient": "ana@example.com",
                "message": {"headers": {"message-id": "20261201.abc@mg.example.com"}},
                "user-variables": {"refund_key": key} if key else {},
                **data,
            },
        }
    )


BOUNCE = {
    "severity": "permanent",
    "reason": "bounce",
    "delivery-status": {
        "code": 550,
        "description": "mailbox unknown",
        "message": "5.1.1 no such user",
    },
}


def post(client, payload: str):
    return client.post(
        reverse("anymail:mailgun_tracking_webhook"), payload, content_type="application/json"
    )


def test_a_signed_bounce_marks_the_row_and_shows_on_the_undelivered_page(client, sent, admin_user):
    assert post(client, mailgun_event("failed", **BOUNCE)).status_code == 200

    row = Email.objects.get()
    assert (row.delivery, row.delivery_detail) == ("bounced", "mailbox unknown")
    client.force_login(admin_user)
    page = client.get(reverse("ops:undelivered")).content.decode()
    assert "bounced: mailbox unknown" in page
    assert f'action="{reverse("ops:resend", args=[row.pk])}"' not in page  # it would bounce again


def test_a_bad_signature_is_refused_and_changes_nothing(client, sent):
    response = post(client, mailgun_event("failed", sign_with="not-the-key", **BOUNCE))

    assert response.status_code == 400
    assert Email.objects.get().delivery == ""


def test_an_event_without_our_metadata_finds_the_row_by_the_providers_id(client, sent):
    assert post(client, mailgun_event("delivered", key=None)).status_code == 200

    assert Email.objects.get().delivery == "delivered"


def test_an_older_event_arriving_late_does_not_overwrite_a_newer_one(client, sent):
    now = time.time()
    post(client, mailgun_event("failed", at=now, **BOUNCE))
    post(client, mailgun_event("delivered", at=now - 60))

    assert Email.objects.get().delivery == "bounced"


def test_an_event_for_a_message_we_never_sent_is_logged_and_answered(client, sent, caplog):
    response = post(client, mailgun_event("delivered", key="someone-else:email"))

    assert response.status_code == 200  # the provider would retry it forever otherwise
    assert Email.objects.get().delivery == ""
    assert "does not know" in caplog.text


YEAR = 365 * 86400


@pytest.mark.parametrize("years", [-2, 1])
def test_a_tracking_signature_two_years_old_or_a_year_ahead_is_refused(client, sent, years):
    payload = mailgun_event("failed", signed_at=time.time() + years * YEAR, **BOUNCE)

    response = post(client, payload)

    assert response.status_code == 400
    assert "from now" in response.json()["error"]
    assert Email.objects.get().delivery == ""


def test_a_tracking_signature_over_a_timestamp_that_is_no_time_is_refused(client, sent):
    response = post(client, mailgun_event("failed", signed_at="soon", **BOUNCE))

    assert response.status_code == 400
    assert response.json()["error"] == "The signature's timestamp is not a time."
    assert Email.objects.get().delivery == ""


def test_a_tracking_signature_used_again_is_refused_and_changes_nothing(client, sent):
    now = time.time()
    assert (
        post(client, mailgun_event("delivered", signed_at=now, token="t" * 50)).status_code == 200
    )

    again = post(client, mailgun_event("failed", signed_at=now, token="t" * 50, **BOUNCE))

    assert again.status_code == 400
    assert again.json()["error"] == "This signature was used already."
    assert Email.objects.get().delivery == "delivered"


def test_an_event_hours_old_signed_now_is_taken(client, sent):
    """Mailgun retries an event for hours: the time it signed is the post's, not the event's."""
    response = post(client, mailgun_event("failed", at=time.time() - 3 * 3600, **BOUNCE))

    assert response.status_code == 200
    assert Email.objects.get().delivery == "bounced"
