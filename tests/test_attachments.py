"""Customers' attachments: a reply's photos by the inbound webhook, kept in S3 (a real
S3-compatible server these tests start: moto's server mode), counted at the server; the limits
(kind by content, size, how many) refuse and say why, storing nothing; served only to users who
may read the message, by a signed link that lasts the setting's seconds; stored once whatever is
delivered twice. The file system (the demo's) is served by the same view, after the same check."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import time
import uuid
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth.models import User
from django.db import transaction
from PIL import Image

from config.storage import attachments_storage
from core.network import NetworkInTransaction
from intake import attachments, inbound
from intake.models import Attachment, Message
from refunds import enqueue, runner, services
from refunds.models import CustomerQuestion, Ticket
from tests.test_settings import manage_check

WEBHOOK_KEY = "inbound-signing-key"
REPLY_DOMAIN = "desk.example.com"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"
ELF = b"\x7fELF\x02\x01\x01\x00"


def photo(head: bytes = JPEG, *, size: int = 2048, seed: str = "a") -> bytes:
    """`size` bytes that start as `head` says (a JPEG's magic number by default); a JPEG or a
    PNG is a real picture of 4 x 3 pixels, its size in its header as a phone's photo's is."""
    if head in (JPEG, PNG):
        head = picture("JPEG" if head == JPEG else "PNG", (4, 3), "L")
    filler = hashlib.sha256(seed.encode()).digest() * (size // 32 + 1)
    return (head + filler)[:size]


def picture(kind: str, size: tuple[int, int], mode: str) -> bytes:
    """A real picture of one colour, written by Pillow in its format `kind`."""
    out = io.BytesIO()
    Image.new(mode, size).save(out, kind)
    return out.getvalue()


@pytest.fixture(autouse=True)
def webhook(settings, monkeypatch):
    """Signed posts are taken; the tests run the threads themselves, no worker is asked."""
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY}
    settings.REFUNDS_REPLY_ADDRESS = "replies+{token}@" + REPLY_DOMAIN
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)


def waiting_on_the_customer(order, opener, asker) -> tuple[Ticket, CustomerQuestion]:
    ticket = services.ticket_open(order_number=order.number, opened_by=opener)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    services.ticket_ask(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=asker,
        question="Could you send a photo of the damage?",
    )
    assert runner.advance(ticket.pk) == "awaiting_customer"
    return ticket, CustomerQuestion.objects.get(ticket=ticket)


def reply_email(
    question: CustomerQuestion,
    files: list[tuple[str, str, bytes]],
    *,
    sender: str = "ana@example.com",
    message_id: str = "<reply-photos@mail.example.com>",
) -> str:
    email = EmailMessage()
    email["From"] = f"Customer <{sender}>"
    email["To"] = f"replies+{question.token}@{REPLY_DOMAIN}"
    email["Subject"] = "Re: A question about your refund request"
    email["Message-ID"] = message_id
    email.set_content("Here are the photos: the vase is in pieces.")
    for filename, declared, content in files:
        maintype, subtype = declared.split("/")
        email.add_attachment(content, maintype=maintype, subtype=subtype, filename=filename)
    return email.as_string()


def post(client, mime_text: str):
    """A signed post of Mailgun's raw-MIME route, a new signature each time (a provider's
    redelivery signs again)."""
    timestamp, token = str(int(time.time())), uuid.uuid4().hex
    signature = hmac.new(
        WEBHOOK_KEY.encode(), f"{timestamp}{token}".encode(), hashlib.sha256
    ).hexdigest()
    fields = {"body-mime": mime_text, "timestamp": timestamp, "token": token}
    return client.post("/mail/mailgun/inbound_mime/", fields | {"signature": signature})


def test_a_reply_with_two_photos_is_kept_in_s3_and_shown_on_the_card_and_the_ticket(
    transactional_db, client, bucket, agent, colleague, late_order
):
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    front, side = photo(seed="front"), photo(PNG, seed="side")
    files = [("front.jpg", "image/jpeg", front), ("side.png", "image/png", side)]
    assert post(client, reply_email(question, files)).status_code == 200
    message = Message.objects.get()
    assert message.resumed_wait and message.ticket_id == ticket.pk
    kept = list(message.files.order_by("id"))
    assert [(a.filename, a.content_type, a.size) for a in kept] == [
        ("front.jpg", "image/jpeg", len(front)),
        ("side.png", "image/png", len(side)),
    ]
    assert bucket.keys() == sorted(f"attachments/{a.name}" for a in kept)  # counted at S3
    assert bucket.read(f"attachments/{kept[0].name}") == front
    assert [a["refused"] for a in message.attachments] == ["", ""]
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(agent)
    card = client.get("/").content.decode()
    assert "the vase is in pieces" in card
    for one in kept:
        assert f'<img src="/attachments/{one.pk}/"' in card
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert all(f'<img src="/attachments/{one.pk}/"' in page for one in kept)
    on_message = client.get(f"/messages/{message.pk}/").content.decode()
    assert all(f'href="/attachments/{one.pk}/"' in on_message for one in kept)


def test_a_12_mb_file_an_executable_named_jpg_and_a_sixth_file_are_refused_saying_why(
    transactional_db, client, bucket, agent, colleague, late_order
):
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    five = [(f"p{i}.jpg", "image/jpeg", photo(seed=str(i))) for i in range(5)]
    files = [
        ("huge.jpg", "image/jpeg", photo(size=12 * 1024 * 1024)),
        ("holiday.jpg", "image/jpeg", photo(ELF, seed="elf")),
        *five,
        ("sixth.pdf", "application/pdf", photo(PDF, seed="sixth")),
    ]
    assert post(client, reply_email(question, files)).status_code == 200
    message = Message.objects.get()
    reasons = {a["name"]: a["refused"] for a in message.attachments}
    assert reasons["huge.jpg"] == "over the limit of 10,485,760 bytes"
    assert reasons["holiday.jpg"] == (
        "not an image (JPEG, PNG, GIF, WebP, HEIC) or a PDF by its content"
    )
    assert reasons["sixth.pdf"] == "more than 5 files on one message: the first 5 are kept"
    assert [reasons[name] for name, _, _ in five] == [""] * 5
    kept = set(message.files.values_list("filename", flat=True))
    assert kept == {name for name, _, _ in five}
    assert len(bucket.keys()) == 5  # nothing stored for the refused ones
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(agent)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert "Not kept: holiday.jpg (image/jpeg, 2.0\xa0KB): not an image" in page
    assert "Not kept: sixth.pdf" in page and "Not kept: huge.jpg" in page
    on_message = client.get(f"/messages/{message.pk}/").content.decode()
    assert "over the limit of 10,485,760 bytes" in on_message


def test_a_picture_of_too_many_pixels_is_kept_as_a_download_and_never_drawn(
    transactional_db, client, bucket, agent, colleague, late_order
):
    """A decompression bomb: about 48 KB of PNG that a browser draws as 20,000 x 20,000 pixels.
    It is kept and linked as a file that downloads; the small picture beside it is drawn."""
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    bomb_png = picture("PNG", (20_000, 20_000), "1")
    files = [("bomb.png", "image/png", bomb_png), ("side.png", "image/png", photo(PNG))]
    assert post(client, reply_email(question, files)).status_code == 200
    bomb, side = Attachment.objects.order_by("id")
    assert bucket.read(f"attachments/{bomb.name}") == bomb_png
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(agent)
    for url in ("/", f"/tickets/{ticket.pk}/", f"/messages/{bomb.message_id}/"):
        html = client.get(url).content.decode()
        assert f'href="/attachments/{bomb.pk}/"' in html
        assert f'<img src="/attachments/{bomb.pk}/"' not in html
        assert "KB: too large or unreadable to preview; it downloads)" in html
        assert f'<img src="/attachments/{side.pk}/"' in html
    signed = parse_qs(urlsplit(client.get(f"/attachments/{bomb.pk}/")["Location"]).query)
    assert signed["response-content-disposition"] == ['attachment; filename="bomb.png"']
    signed = parse_qs(urlsplit(client.get(f"/attachments/{side.pk}/")["Location"]).query)
    assert signed["response-content-disposition"] == ['inline; filename="side.png"']


def test_a_picture_is_drawn_up_to_the_settings_pixels_read_from_its_header(settings):
    settings.REFUNDS_ATTACHMENT_PREVIEW_PIXELS = 12
    assert attachments.previewable("image/png", photo(PNG))  # 4 x 3
    assert attachments.previewable("image/jpeg", photo(JPEG))
    assert not attachments.previewable("image/png", PNG + bytes(64))  # no size to read
    assert not attachments.previewable("image/heic", photo(b"\x00\x00\x00\x18ftypheic"))
    settings.REFUNDS_ATTACHMENT_PREVIEW_PIXELS = 11
    assert not attachments.previewable("image/png", photo(PNG))


def test_a_webhook_delivered_twice_stores_each_photo_once(
    transactional_db, client, bucket, agent, colleague, late_order
):
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    files = [("a.jpg", "image/jpeg", photo(seed="a")), ("b.jpg", "image/jpeg", photo(seed="b"))]
    mime_text = reply_email(question, files)
    assert post(client, mime_text).status_code == 200
    assert post(client, mime_text).status_code == 200  # the provider delivers it again
    assert Message.objects.count() == 1 and Attachment.objects.count() == 2
    assert len(bucket.keys()) == 2
    assert CustomerQuestion.objects.get(pk=question.pk).reply_id is not None


def test_a_post_that_fails_after_its_photos_were_written_is_retried_onto_the_same_objects(
    transactional_db, client, bucket, agent, colleague, late_order, monkeypatch
):
    """The objects are written before the message's row commits: a post that dies in between
    (here its transaction fails) leaves objects the provider's retry writes again by the same
    names and then records, so no row names a missing object and no object is kept twice."""
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    files = [("a.jpg", "image/jpeg", photo(seed="a")), ("b.pdf", "application/pdf", photo(PDF))]
    mime_text = reply_email(question, files)
    real = inbound.message_receive

    def dies(**kwargs):
        raise RuntimeError("the web process died here")

    monkeypatch.setattr(inbound, "message_receive", dies)
    with pytest.raises(RuntimeError):
        post(client, mime_text)
    written = bucket.keys()
    assert len(written) == 2 and not Message.objects.exists()
    monkeypatch.setattr(inbound, "message_receive", real)
    assert post(client, mime_text).status_code == 200
    assert bucket.keys() == written
    assert sorted(f"attachments/{a.name}" for a in Attachment.objects.all()) == written
    assert CustomerQuestion.objects.get(pk=question.pk).reply_id is not None


def test_the_photo_link_is_a_signed_s3_url_signed_now_for_the_settings_seconds(
    transactional_db, client, bucket, agent, colleague, late_order
):
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    front = photo(seed="front")
    post(client, reply_email(question, [("front.jpg", "image/jpeg", front)]))
    kept = Attachment.objects.get()
    client.force_login(agent)
    response = client.get(f"/attachments/{kept.pk}/")
    assert response.status_code == 302 and response["Cache-Control"] == "private, no-store"
    url = response["Location"]
    assert url.startswith(bucket.endpoint)
    query = parse_qs(urlsplit(url).query)
    assert query["X-Amz-Expires"] == ["30"] and "X-Amz-Signature" in query
    fetched = requests.get(url, timeout=10)
    assert fetched.status_code == 200 and fetched.content == front
    assert fetched.headers["Content-Type"] == "image/jpeg"
    unsigned = f"{bucket.endpoint}/{bucket.name}/attachments/{kept.name}"
    assert requests.get(unsigned, timeout=10).status_code == 403  # the bucket is private
    # moto does not enforce X-Amz-Expires (S3 does): the link's life is read from the link.
    signed_at = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - signed_at).total_seconds()) < 10


@pytest.fixture
def nobody(db) -> User:
    return User.objects.create_user("nobody", password="pw")


def test_only_users_who_may_read_the_message_get_its_photo(
    transactional_db, client, bucket, manager, agent, colleague, big_order, nobody
):
    """A manager-level ticket ($48.00): its reply's photo is not an agent's to see (another
    scope: 404, as the ticket and the message are), nor a user's in no desk group (403)."""
    ticket, question = waiting_on_the_customer(big_order, colleague, manager)
    files = [("front.jpg", "image/jpeg", photo(seed="front"))]
    post(client, reply_email(question, files, sender="dev@example.com"))
    kept = Attachment.objects.get()
    url = f"/attachments/{kept.pk}/"
    assert client.get(url).status_code == 302 and "/login/" in client.get(url)["Location"]
    client.force_login(agent)
    assert client.get(f"/tickets/{ticket.pk}/").status_code == 404
    assert client.get(url).status_code == 404
    client.force_login(nobody)
    assert client.get(url).status_code == 403
    client.force_login(colleague)  # opened the ticket: sees it, and so its photo
    assert client.get(url).status_code == 302
    client.force_login(manager)
    assert client.get(url).status_code == 302


@pytest.fixture
def folder(settings, tmp_path) -> Path:
    """The desk's attachments storage in a private folder, as the demo's settings make it."""
    folder = tmp_path / "attachments"
    settings.STORAGES = settings.STORAGES | {
        "attachments": attachments_storage(folder=str(folder), url_seconds=30)
    }
    return folder


def test_the_demo_keeps_photos_in_a_private_folder_served_only_through_the_check(
    transactional_db, client, settings, folder, agent, colleague, late_order, nobody
):
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    front = photo(seed="front")
    post(client, reply_email(question, [("front.jpg", "image/jpeg", front)]))
    kept = Attachment.objects.get()
    assert (folder / kept.name).read_bytes() == front
    assert not str(folder).startswith(str(settings.STATIC_ROOT))
    client.force_login(nobody)
    assert client.get(f"/attachments/{kept.pk}/").status_code == 403
    client.force_login(agent)
    response = client.get(f"/attachments/{kept.pk}/")
    assert response.status_code == 200 and b"".join(response.streaming_content) == front
    assert response["Content-Type"] == "image/jpeg"
    assert response["Content-Disposition"] == 'inline; filename="front.jpg"'
    assert response["Content-Security-Policy"] == "sandbox; default-src 'none'"


def test_a_photo_deleted_from_the_folder_answers_410_in_words_and_its_ticket_still_shows(
    transactional_db, client, folder, agent, colleague, late_order
):
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    post(client, reply_email(question, [("front.jpg", "image/jpeg", photo(seed="front"))]))
    kept = Attachment.objects.get()
    (folder / kept.name).unlink()
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(agent)
    response = client.get(f"/attachments/{kept.pk}/")
    assert response.status_code == 410
    assert "This file is no longer in the desk's storage" in response.content.decode()
    page = client.get(f"/tickets/{ticket.pk}/")
    assert page.status_code == 200 and f'href="/attachments/{kept.pk}/"' in page.content.decode()


def test_a_photo_deleted_from_the_bucket_is_s3s_own_404_and_its_ticket_still_shows(
    transactional_db, client, bucket, agent, colleague, late_order
):
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    post(client, reply_email(question, [("front.jpg", "image/jpeg", photo(seed="front"))]))
    kept = Attachment.objects.get()
    bucket.client.delete_object(Bucket=bucket.name, Key=f"attachments/{kept.name}")  # type: ignore[attr-defined]
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(agent)
    link = client.get(f"/attachments/{kept.pk}/")
    assert link.status_code == 302
    # S3's own answer: 404, or 403 to a caller that may not list the bucket (as moto's is).
    assert requests.get(link["Location"], timeout=10).status_code in (403, 404)
    page = client.get(f"/tickets/{ticket.pk}/")
    assert page.status_code == 200 and f'href="/attachments/{kept.pk}/"' in page.content.decode()


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (JPEG, "image/jpeg"),
        (PNG, "image/png"),
        (b"GIF89a\x01\x00", "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"\x00\x00\x00\x18ftypheic\x00\x00", "image/heic"),
        (PDF, "application/pdf"),
        (ELF, ""),
        (b"MZ\x90\x00\x03\x00", ""),
        (b"<html><script>", ""),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", ""),
    ],
)
def test_the_kind_is_read_from_the_bytes(head, kind):
    assert attachments.content_type(photo(head)) == kind


def test_photos_of_a_reply_that_resumed_nothing_are_not_shown_as_the_customers(
    transactional_db, client, bucket, agent, colleague, late_order
):
    """A reply from another address joins the timeline and resumes nothing: its photo is kept
    and on its message's page, never beside the customer's quoted reply."""
    ticket, question = waiting_on_the_customer(late_order, colleague, agent)
    files = [("theirs.jpg", "image/jpeg", photo(seed="theirs"))]
    post(client, reply_email(question, files, message_id="<x@y>", sender="mallory@example.com"))
    post(client, reply_email(question, [("ana.jpg", "image/jpeg", photo(seed="ana"))]))
    theirs, anas = Attachment.objects.order_by("id")
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(agent)
    for page in (client.get("/"), client.get(f"/tickets/{ticket.pk}/")):
        html = page.content.decode()
        assert f"/attachments/{anas.pk}/" in html and f"/attachments/{theirs.pk}/" not in html
    on_message = client.get(f"/messages/{theirs.message_id}/").content.decode()
    assert f'href="/attachments/{theirs.pk}/"' in on_message


def test_the_storage_is_never_written_inside_a_database_transaction(db, bucket):
    _, kept = attachments.attachments_judge(
        [attachments.Part("a.jpg", "image/jpeg", photo())], key="k"
    )
    with transaction.atomic(), pytest.raises(NetworkInTransaction):
        attachments.attachments_store(kept)
    assert bucket.keys() == []


@pytest.mark.parametrize(
    ("sse", "kms_key_id"), [("AES256", ""), ("aws:kms", "alias/desk-photos"), ("", "")]
)
def test_each_photo_is_encrypted_by_the_store_as_the_setting_asks(
    db, bucket, settings, sse, kms_key_id
):
    settings.STORAGES = settings.STORAGES | {
        "attachments": attachments_storage(
            folder="",
            bucket=bucket.name,
            endpoint_url=bucket.endpoint,
            region="us-east-1",
            url_seconds=30,
            sse=sse,
            kms_key_id=kms_key_id,
        )
    }
    _, kept = attachments.attachments_judge(
        [attachments.Part("a.jpg", "image/jpeg", photo())], key="k"
    )
    attachments.attachments_store(kept)
    (key,) = bucket.keys()
    head = bucket.client.head_object(Bucket=bucket.name, Key=key)  # type: ignore[attr-defined]
    assert head.get("ServerSideEncryption") == (sse or None)
    assert head.get("SSEKMSKeyId", "").endswith(kms_key_id)


SHOW_STORAGE = (
    "import json; from django.conf import settings; "
    "print(json.dumps([settings.STORAGES['attachments'], "
    "settings.CONTENT_SECURITY_POLICY['DIRECTIVES']['img-src'], str(settings.STATIC_ROOT)]))"
)


def test_the_settings_keep_attachments_in_a_private_folder_by_default(tmp_path):
    result = manage_check(tmp_path, "shell", "-c", SHOW_STORAGE)
    assert result.returncode == 0, result.stderr
    storage, img_src, static_root = json.loads(result.stdout.strip().splitlines()[-1])
    assert storage["BACKEND"] == "django.core.files.storage.FileSystemStorage"
    assert storage["OPTIONS"]["location"] == str(tmp_path / "attachments")
    assert storage["OPTIONS"]["base_url"] is None and not storage["OPTIONS"]["location"].startswith(
        static_root
    )
    assert img_src == ["'self'", "data:"]


def test_the_settings_keep_attachments_in_s3_when_a_bucket_is_named(tmp_path):
    result = manage_check(
        tmp_path,
        "shell",
        "-c",
        SHOW_STORAGE,
        REFUNDS_ATTACHMENTS_S3_BUCKET="desk-photos",
        REFUNDS_ATTACHMENTS_S3_ENDPOINT_URL="https://s3.example.com:9000",
        REFUNDS_ATTACHMENTS_URL_SECONDS="45",
    )
    assert result.returncode == 0, result.stderr
    storage, img_src, _ = json.loads(result.stdout.strip().splitlines()[-1])
    assert storage["BACKEND"] == "storages.backends.s3.S3Storage"
    options = storage["OPTIONS"]
    assert options["bucket_name"] == "desk-photos" and options["querystring_auth"] is True
    assert options["querystring_expire"] == 45 and options["default_acl"] is None
    assert options["endpoint_url"] == "https://s3.example.com:9000"
    assert img_src == ["'self'", "data:", "https://s3.example.com:9000"]


def test_a_bad_endpoint_stops_the_start_naming_the_variable(tmp_path):
    result = manage_check(
        tmp_path,
        REFUNDS_ATTACHMENTS_S3_BUCKET="desk-photos",
        REFUNDS_ATTACHMENTS_S3_ENDPOINT_URL="s3.example.com",
    )
    assert result.returncode == 1
    assert "REFUNDS_ATTACHMENTS_S3_ENDPOINT_URL must start with one of http://" in result.stderr
