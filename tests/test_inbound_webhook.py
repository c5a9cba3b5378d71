"""Email in through Mailgun's inbound webhook (README's default ESP), with payloads signed the way
anymail's own tests sign them: the form fields Mailgun's forward() route posts, and
signature = HMAC-SHA256(signing key, timestamp + token)."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid

import pytest

from intake.models import Message
from refunds import enqueue

KEY = "inbound-signing-key"
URL = "/mail/mailgun/inbound_mime/"
MIME = (
    "From: Ana Souza <ana@example.com>\r\n"
    "To: refunds@desk.example.com\r\n"
    "Subject: Late parcel\r\n"
    "Message-ID: <{mid}@mail.example.com>\r\n"
    "Content-Type: text/plain; charset={charset}\r\n"
    "Content-Transfer-Encoding: {cte}\r\n"
    "\r\n"
    "{body}\r\n"
)
LATE = "Hi, my order #1042 came a week late, can I have the delivery charge back? Ana"


@pytest.fixture(autouse=True)
def signing_key(settings):
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": KEY}


@pytest.fixture
def woken(monkeypatch) -> list[int]:
    ids: list[int] = []
    monkeypatch.setattr(enqueue, "send", lambda name, pk: ids.append(pk) or True)
    return ids


def signed(fields: dict[str, str], key: str = KEY) -> dict[str, str]:
    timestamp, token = str(int(time.time())), uuid.uuid4().hex
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {**fields, "timestamp": timestamp, "token": token, "signature": signature}


def mime(body: str = LATE, *, mid: str = "m1", charset: str = "utf-8", cte: str = "8bit") -> str:
    return MIME.format(mid=mid, charset=charset, cte=cte, body=body)


@pytest.fixture
def post(client, django_capture_on_commit_callbacks):
    """POST as the provider does; what would run on commit runs."""

    def send(payload: dict[str, str]):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(URL, payload)

    return send


def test_a_signed_email_becomes_a_message_and_starts_its_intake(post, db, woken):
    response = post(signed({"body-mime": mime(), "recipient": "refunds@desk.example.com"}))
    assert response.status_code == 200
    message = Message.objects.get()
    assert message.channel == "email" and message.key == "email:<m1@mail.example.com>"
    assert message.sender == "ana@example.com" and message.sender_name == "Ana Souza"
    assert message.subject == "Late parcel" and "#1042" in message.body
    assert "Message-ID: <m1@mail.example.com>" in message.raw
    assert message.sorting_reason == "" and woken == [message.pk]


def test_the_same_email_delivered_twice_is_one_message(post, db, woken):
    assert post(signed({"body-mime": mime()})).status_code == 200
    assert post(signed({"body-mime": mime()})).status_code == 200
    assert Message.objects.count() == 1 and len(woken) == 1


def test_a_bad_signature_is_refused_and_stores_nothing(post, db, woken):
    response = post(signed({"body-mime": mime()}, key="not-the-key"))
    assert response.status_code == 400
    assert Message.objects.count() == 0 and woken == []


def test_an_unsigned_post_is_refused_and_stores_nothing(post, db, woken):
    assert post({"body-mime": mime()}).status_code == 400
    assert Message.objects.count() == 0


def test_an_email_without_text_is_kept_and_goes_to_sorting_with_the_reason(post, db, woken):
    assert post(signed({"body-mime": mime(body="")})).status_code == 200
    message = Message.objects.get()
    assert message.sorting_reason == "The message has no text." and woken == [message.pk]


def test_an_oversized_email_is_cut_at_the_limit_for_reading_and_kept_whole_raw(
    post, db, woken, settings
):
    settings.INTAKE_MAX_CHARS = 500
    body = "late #1042 " * 199 + "the very end"
    assert post(signed({"body-mime": mime(body=body)})).status_code == 200
    message = Message.objects.get()
    assert len(message.body) == 500 and message.uncut_chars == len(body) + 1  # MIME's newline
    assert message.sorting_reason == "" and woken == [message.pk]  # read and placed as any
    assert "the very end" in message.raw
    assert message.cut_note.startswith("This message was cut to the first 500 characters")


def test_an_email_whose_text_is_not_utf8_is_kept_with_replacement_characters(post, db, woken):
    import base64

    broken = base64.b64encode(b"order #1042 came late \xff\xfe caf\xe9").decode()
    assert post(signed({"body-mime": mime(body=broken, cte="base64")})).status_code == 200
    message = Message.objects.get()
    assert "order #1042 came late" in message.body and "\ufffd" in message.body
    assert message.sorting_reason == ""


def test_an_email_in_a_charset_python_does_not_know_is_read_as_utf8(post, db, woken):
    response = post(signed({"body-mime": mime(charset="x-unknown-charset")}))
    assert response.status_code == 200
    assert "#1042" in Message.objects.get().body


def test_an_email_whose_from_is_no_address_is_kept_for_sorting(post, db, woken):
    payload = mime().replace("Ana Souza <ana@example.com>", "Ana Souza")
    assert post(signed({"body-mime": payload})).status_code == 200
    message = Message.objects.get()
    assert "Ana Souza" in message.sender
    assert "is not an email address" in message.sorting_reason


def test_an_email_without_a_message_id_is_one_message_by_its_bytes(post, db, woken):
    payload = mime().replace("Message-ID: <m1@mail.example.com>\r\n", "")
    assert post(signed({"body-mime": payload})).status_code == 200
    assert post(signed({"body-mime": payload})).status_code == 200
    assert Message.objects.get().key.startswith("email:sha256:")
