"""Email in through Mailgun's inbound webhook (the default ESP of docs/integrations.md), with
payloads signed the way anymail's own tests sign them: the form fields Mailgun's forward() route
posts, and signature = HMAC-SHA256(signing key, timestamp + token)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
import uuid
from io import BytesIO

import pytest
from django.core.exceptions import RequestDataTooBig
from django.core.files.storage import storages
from django.test import RequestFactory
from prometheus_client import REGISTRY

from intake.models import Message, SignatureToken
from intake.webhook import WholeForm
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


def signed(fields: dict[str, str], key: str = KEY, *, at: float | None = None) -> dict[str, str]:
    timestamp, token = str(int(time.time() if at is None else at)), uuid.uuid4().hex
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {**fields, "timestamp": timestamp, "token": token, "signature": signature}


def mime(body: str = LATE, *, mid: str = "m1", charset: str = "utf-8", cte: str = "8bit") -> str:
    return MIME.format(mid=mid, charset=charset, cte=cte, body=body)


@pytest.fixture
def post(client, django_capture_on_commit_callbacks):
    """POST as the provider does; what would run on commit runs."""

    def send(payload: dict[str, str], url: str = URL):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(url, payload)

    return send


def test_a_signed_email_becomes_a_message_and_starts_its_intake(post, db, woken):
    response = post(signed({"body-mime": mime(), "recipient": "refunds@desk.example.com"}))
    assert response.status_code == 200
    message = Message.objects.get()
    assert (
        message.channel == "email"
        and message.key == "email:<m1@mail.example.com> from ana@example.com"
    )
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


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value("refund_desk_inbound_refused_total", {"reason": reason}) or 0


# 3 MB that start as a JPEG does (the kind is read from the bytes), 4 MB once base64 in the MIME.
PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 12_000
PHOTO_SIZE = len(PHOTO)
PHOTO_SHA256 = hashlib.sha256(PHOTO).hexdigest()
KEPT = [
    {"name": "damage.jpg", "type": "image/jpeg", "size": PHOTO_SIZE, "sha256": PHOTO_SHA256}
    | {"refused": ""}
]
WITH_PHOTO = (
    "From: Ana Souza <ana@example.com>\r\n"
    "Subject: Broken on arrival\r\n"
    "Message-ID: <photo@mail.example.com>\r\n"
    'Content-Type: multipart/mixed; boundary="b1"\r\n'
    "\r\n--b1\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n\r\n"
    "Order #1042 arrived broken, photo attached. Olá, Ana\r\n"
    "--b1\r\n"
    'Content-Type: image/jpeg; name="damage.jpg"\r\n'
    'Content-Disposition: attachment; filename="damage.jpg"\r\n'
    "Content-Transfer-Encoding: base64\r\n\r\n"
    + base64.encodebytes(PHOTO).decode().replace("\n", "\r\n")
    + "--b1--\r\n"
)


def test_an_email_with_a_3_mb_photo_is_taken_and_its_photo_kept_apart(post, db, woken):
    assert len(WITH_PHOTO) > 4_000_000  # over Django's 2.5 MB for one form field
    response = post(signed({"body-mime": WITH_PHOTO}))
    assert response.status_code == 200
    message = Message.objects.get()
    assert "#1042 arrived broken" in message.body and "Olá" in message.body
    assert message.attachments == KEPT
    [kept] = message.files.all()
    assert (kept.filename, kept.content_type, kept.size) == ("damage.jpg", "image/jpeg", PHOTO_SIZE)
    assert storages["attachments"].open(kept.name).read() == PHOTO
    # The raw MIME names it in its place rather than carrying its bytes twice.
    assert f"(attachment damage.jpg, {PHOTO_SIZE} bytes, sha256 {PHOTO_SHA256}:" in message.raw
    assert len(message.raw) < 10_000 and woken == [message.pk]


def test_the_parsed_route_takes_a_3_mb_attachment_and_keeps_it(client, db, woken):
    from django.core.files.uploadedfile import SimpleUploadedFile

    fields = signed(
        {
            "body-plain": "Order #1042 arrived broken.",
            "message-headers": '[["From", "Ana Souza <ana@example.com>"], '
            '["Subject", "Broken"], ["Message-Id", "<parsed@mail.example.com>"]]',
            "attachment-count": "1",
        }
    )
    photo = SimpleUploadedFile("damage.jpg", PHOTO, content_type="image/jpeg")
    response = client.post("/mail/mailgun/inbound/", {**fields, "attachment-1": photo})
    assert response.status_code == 200
    message = Message.objects.get()
    assert message.sender == "ana@example.com" and "#1042" in message.body
    assert message.attachments == KEPT and message.files.get().sha256 == PHOTO_SHA256


def test_a_post_over_the_inbound_limit_is_refused_413_counted_and_stores_nothing(
    post, db, woken, settings
):
    settings.INBOUND_MAX_BODY_BYTES = 2 * 1024 * 1024
    before = refused("too_large")
    response = post(signed({"body-mime": WITH_PHOTO}))
    assert response.status_code == 413
    assert response.json() == {
        "status": 413,
        "code": "payload_too_large",
        "error": "The request body is too large (at most 2097152 bytes).",
    }
    assert refused("too_large") == before + 1
    assert Message.objects.count() == 0 and woken == []


def test_a_post_whose_content_length_is_over_the_limit_is_refused_before_it_is_read(
    client, db, woken, settings
):
    settings.INBOUND_MAX_BODY_BYTES = 2 * 1024 * 1024
    payload = signed({"body-mime": mime()})
    response = client.post(URL, payload, CONTENT_LENGTH=str(2 * 1024 * 1024 + 1))
    assert response.status_code == 413 and Message.objects.count() == 0


def test_a_body_longer_than_its_content_length_said_is_refused_by_what_was_read():
    request = RequestFactory().post(URL)
    form = WholeForm(request, limit=1000)
    with pytest.raises(RequestDataTooBig):
        form.handle_raw_input(BytesIO(b"x" * 1001), request.META, 10, b"b1")


def test_a_form_of_more_fields_and_files_than_django_takes_is_refused_before_it_is_parsed(
    post, db, woken
):
    """WholeForm replaces Django's parser, and keeps its limits: 30,000 one-byte fields took 9 s."""
    response = post(signed({f"f{n}": "x" for n in range(301)}), "/mail/mailgun/inbound/")
    assert response.status_code == 400
    assert "the form has more than 300 fields and files" in response.json()["error"]
    assert Message.objects.count() == 0


def test_other_urls_keep_djangos_limit(client, db):
    response = client.post("/login/", {"username": "x" * 3_000_000, "password": "pw"})
    assert response.status_code == 400


def test_a_signature_used_again_is_refused_whatever_email_it_carries(post, db, woken):
    first = signed({"body-mime": mime(mid="first")})
    before = refused("replayed")
    assert post(first).status_code == 200
    again = post({**first, "body-mime": mime(mid="second", body="Refund order #9999 to me")})
    assert again.status_code == 400
    assert again.json()["error"] == "This signature was used already."
    assert post(first).status_code == 400
    assert refused("replayed") == before + 2
    assert Message.objects.count() == 1 and len(woken) == 1


@pytest.mark.parametrize("years", [-2, 1])
def test_a_signature_two_years_old_or_a_year_ahead_is_refused(post, db, woken, years):
    before = refused("stale")
    response = post(signed({"body-mime": mime()}, at=time.time() + years * 365 * 86400))
    assert response.status_code == 400 and "from now" in response.json()["error"]
    assert refused("stale") == before + 1
    assert Message.objects.count() == 0 and SignatureToken.objects.count() == 0


def test_a_signature_of_year_1_is_refused_not_stored_as_received_then(post, db, woken):
    response = post(signed({"body-mime": mime()}, at=-62135596800))
    assert response.status_code == 400 and "0001-01-01" in response.json()["error"]
    assert Message.objects.count() == 0


def test_a_signature_within_the_window_is_taken_and_its_token_kept_until_it_expires(
    post, db, woken, settings
):
    settings.INBOUND_SIGNATURE_MAX_AGE_SECONDS = 600
    assert post(signed({"body-mime": mime(mid="late")}, at=time.time() - 500)).status_code == 200
    SignatureToken.objects.create(token="old", signed_at="2020-01-01T00:00:00Z")
    assert post(signed({"body-mime": mime(mid="now")})).status_code == 200
    assert SignatureToken.objects.count() == 2 and Message.objects.count() == 2


def test_a_bad_signature_is_one_warning_line_without_a_traceback(post, db, woken, caplog):
    before = refused("signature")
    with caplog.at_level(logging.INFO):
        assert post(signed({"body-mime": mime()}, key="not-the-key")).status_code == 400
    ours = [r for r in caplog.records if r.name == "intake.webhook"]
    assert [(r.levelname, r.exc_info) for r in ours] == [("WARNING", None)]
    assert "incorrect signature" in ours[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert refused("signature") == before + 1


def test_the_same_message_id_from_another_sender_is_another_message(post, db, woken):
    assert post(signed({"body-mime": mime()})).status_code == 200
    other = mime(body="Refund my order #2001 please").replace("ana@example.com", "bo@example.com")
    assert post(signed({"body-mime": other})).status_code == 200
    assert sorted(Message.objects.values_list("sender", flat=True)) == [
        "ana@example.com",
        "bo@example.com",
    ]
    assert len(woken) == 2


def test_a_from_whose_name_holds_cr_lf_is_taken_with_its_address(post, db, woken):
    payload = mime().replace("Ana Souza", "=?utf-8?q?Ana=0D=0ABcc=3A_x=40evil.example?=")
    assert post(signed({"body-mime": payload})).status_code == 200
    message = Message.objects.get()
    assert message.sender == "ana@example.com" and message.sorting_reason == ""
    assert message.sender_name == "Ana Bcc: x@evil.example"


ODD = {
    "no body-mime field": {},
    "an empty message": {"body-mime": ""},
    "no headers, junk": {"body-mime": "\x00\xff junk"},
    "a From that is junk": {"body-mime": 'From: <<<@@@>>>, "\r\n\r\nhi #1042'},
    "two From addresses": {"body-mime": "From: a@example.com, b@example.com\r\n\r\nhi"},
    "a header of 200,000 characters": {
        "body-mime": "Subject: " + "a" * 200_000 + "\r\nFrom: a@example.com\r\n\r\nhi"
    },
    "a boundary never closed, a charset that is junk": {
        "body-mime": 'From: a@example.com\r\nContent-Type: multipart/mixed; boundary="z"\r\n\r\n'
        '--z\r\nContent-Type: text/plain; charset="\xff"\r\n\r\nhi\r\n'
    },
    "base64 that is not": {
        "body-mime": "From: a@example.com\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!"
    },
    "encoded words in an unknown charset": {
        "body-mime": "From: =?x-bad?q?Ana?= <a@example.com>\r\nSubject: =?x-bad?b?!!!?=\r\n\r\nhi"
    },
    "an attachment without a name or content": {
        "body-mime": 'From: a@example.com\r\nContent-Type: multipart/mixed; boundary="z"\r\n\r\n'
        "--z\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment\r\n\r\n--z--"
    },
}
PARSED_ODD = {
    "no fields at all": {},
    "no message-headers": {"from": "a@example.com", "body-plain": "hi"},
    "message-headers that are not JSON": {"from": "a@example.com", "message-headers": "[bad"},
    "a content-id-map that is not JSON": {
        "message-headers": "[]",
        "attachment-count": "1",
        "content-id-map": "{bad",
    },
    "the store() action's fields": {"message-headers": "[]", "attachments": "[]"},
    "message-headers of another shape": {"message-headers": '{"Subject": 1}', "body-plain": "hi"},
    "message-headers that are a number": {"message-headers": "5", "body-plain": "hi"},
    "a tracking event": {"event": "delivered", "message-headers": "[]"},
}


@pytest.mark.parametrize("shape", [*ODD, *PARSED_ODD])
def test_every_odd_shape_answers_2xx_or_a_clear_4xx(post, db, woken, shape):
    fields, url = (
        (ODD[shape], URL) if shape in ODD else (PARSED_ODD[shape], "/mail/mailgun/inbound/")
    )
    response = post(signed(fields), url)
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert response.json()["error"]
        assert Message.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_one_signature_posted_twice_at_once_is_taken_once(woken):
    """The token's UNIQUE row is the guard, not the look before it: A holds its token
    (uncommitted, waiting on a row another session holds) while B, the same signature with
    another email, looks, finds nothing, and inserts; B must lose when A commits."""
    import threading

    from django.db import connection, transaction
    from django.test import Client
    from django.utils import timezone

    from tests.conftest import in_another_session, wait_for

    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs one writer at a time: the two posts cannot overlap")
    first = signed({"body-mime": mime(mid="a")})
    second = {**first, "body-mime": mime(mid="b", body="Refund order #9999 to me")}
    release, holding = threading.Event(), threading.Event()

    def hold_a_message_row() -> None:  # A's message insert waits on this until rolled back
        with transaction.atomic():
            Message.objects.create(
                key="email:<a@mail.example.com> from ana@example.com",
                channel="email",
                sender="ana@example.com",
                received_at=timezone.now(),
                thread_id="held",
            )
            holding.set()
            release.wait(30)
            transaction.set_rollback(True)

    def waiting() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            return cursor.fetchone()[0]

    answers: dict[str, int] = {}

    def poster(name: str, payload: dict[str, str]):
        return lambda: answers.setdefault(name, Client().post(URL, payload).status_code)

    holder = in_another_session(hold_a_message_row)
    assert holding.wait(10)
    a = in_another_session(poster("a", first))
    wait_for(lambda: waiting() == 1, timeout=10)
    b = in_another_session(poster("b", second))
    wait_for(lambda: waiting() == 2, timeout=10)
    release.set()
    for thread in (holder, a, b):
        thread.join(30)
    assert answers == {"a": 200, "b": 400}
    assert list(Message.objects.values_list("key", flat=True)) == [
        "email:<a@mail.example.com> from ana@example.com"
    ]


def test_an_email_of_a_thousand_parts_is_kept_with_its_first_hundred_read(post, db, woken):
    """150,000 one-byte parts held a worker until it was killed: the parts read are bounded
    (each part read is one described on the message), and the message says so."""
    parts = "".join(
        f"--z\r\nContent-Type: application/octet-stream\r\n\r\n{n % 10}\r\n" for n in range(1000)
    )
    payload = (
        'From: Ana Souza <ana@example.com>\r\nContent-Type: multipart/mixed; boundary="z"\r\n'
        f"\r\n--z\r\nContent-Type: text/plain\r\n\r\n{LATE}\r\n{parts}--z--\r\n"
    )
    assert post(signed({"body-mime": payload})).status_code == 200
    message = Message.objects.get()
    assert "#1042" in message.body and woken == [message.pk]
    assert 90 <= len(message.attachments) <= 100
    assert (
        message.cut_note == "This email was read in part. Only its first 100 MIME parts were read."
    )


def test_a_long_email_read_in_part_never_says_it_is_kept_whole(post, db, woken, settings):
    """Its text cut for length and its parts past the first hundred not read: the raw email is
    kept as far as it was read, and the page says so, not that it is kept whole."""
    settings.INTAKE_MAX_CHARS = 1000
    parts = "".join(f"--z\r\nContent-Type: text/plain\r\n\r\n{n}\r\n" for n in range(200))
    payload = (
        'From: Ana Souza <ana@example.com>\r\nContent-Type: multipart/mixed; boundary="z"\r\n'
        f"\r\n--z\r\nContent-Type: text/plain\r\n\r\n{LATE} {'more words ' * 200}\r\n"
        f"{parts}--z--\r\n"
    )
    assert post(signed({"body-mime": payload})).status_code == 200
    note = Message.objects.get().cut_note
    assert "cut to the first 1,000 characters" in note and "MIME parts were read" in note
    assert "whole" not in note and "kept as far as it was read" in note


def test_an_email_to_40000_addresses_is_kept_with_its_first_hundred_read(post, db, woken):
    to = ", ".join(f"Someone {n} <s{n}@example.com>" for n in range(40_000))
    payload = mime().replace("To: refunds@desk.example.com", f"To: {to}")
    assert (
        post(signed({"body-mime": payload, "recipient": "refunds@desk.example.com"})).status_code
        == 200
    )
    message = Message.objects.get()
    assert message.sender == "ana@example.com" and woken == [message.pk]
    assert message.unread == "Only the first 100 addresses it was sent to were read."
    assert f"To: {to}" in message.raw  # kept as it came


def test_mailguns_parsed_route_reads_its_first_200_headers_each_on_one_line(client, db, woken):
    """A CR/LF in a value of message-headers (Mailgun decodes a display name's encoded words)
    made the email package refuse the whole email: a 500, and the email lost."""
    headers = [
        ["From", "Ana\r\nSouza <ana@example.com>"],
        ["Subject", "Late\r\nparcel"],
        ["Message-Id", "<parsed-crlf@mail.example.com>"],
    ] + [["X-Filler", f"{n}"] for n in range(300)]
    fields = signed({"body-plain": LATE, "message-headers": json.dumps(headers)})
    response = client.post("/mail/mailgun/inbound/", fields)
    assert response.status_code == 200, response.content
    message = Message.objects.get()
    assert message.sender == "ana@example.com" and message.subject == "Late parcel"
    assert message.sender_name == "Ana Souza"
    assert message.unread == "Only its first 200 headers were read, up to 16,000 characters each."
    assert message.raw.count("X-Filler") == 197


def test_a_from_whose_long_encoded_name_holds_cr_lf_is_kept_whole(post, db, woken):
    """Flattening a long header refolds it, which parses it, which refused the name's CR/LF; the
    fallback read the From again and raised again: a 500, and the email lost."""
    name = "=?utf-8?q?Ana_Souza_de_Oliveira_Santos=0D=0ABcc=3A_x=40evil.example_and_more_words?="
    assert post(signed({"body-mime": mime().replace("Ana Souza", name)})).status_code == 200
    message = Message.objects.get()
    assert message.sender == "ana@example.com" and message.sorting_reason == ""
    assert f"From: {name} <ana@example.com>" in message.raw and LATE in message.raw


def test_a_nul_in_an_attachments_file_name_is_kept_as_a_space(post, db, woken):
    payload = WITH_PHOTO.replace('filename="damage.jpg"', 'filename="dam\x00age.jpg"')
    assert post(signed({"body-mime": payload})).status_code == 200
    message = Message.objects.get()
    assert message.files.get().filename == "dam age.jpg"
    assert message.attachments[0]["name"] == "dam age.jpg"
