"""The door in front of the mail provider's webhooks: a size limit, and a clear 4xx logged in one
line for a post we do not take. MailgunInbound bounds the work per email: 150,000 one-byte MIME
parts would hold a worker until it is killed, and the email be lost."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import HTTP
from functools import wraps
from typing import Any

from anymail.exceptions import AnymailConfigurationError, AnymailWebhookValidationFailure
from anymail.signals import AnymailEvent, tracking
from anymail.webhooks.mailgun import MailgunInboundWebhookView
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import FileUploadHandler
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, QueryDict
from django.http.multipartparser import MultiPartParserError
from django.utils import timezone
from django.utils.datastructures import MultiValueDict

from intake.models import SignatureToken
from refunds import metrics

log = logging.getLogger(__name__)
# A post not of the provider's shape: a 400, never a 500 the provider retries for hours.
MALFORMED = (KeyError, json.JSONDecodeError, MultiPartParserError, AnymailConfigurationError)
# ESPs that sign a timestamp and a one-time token (anymail hands the token over as event_id).
SIGNS_TIMESTAMP_AND_TOKEN = {"Mailgun"}
# The email package reads a header of thousands of words in seconds.
MOST_PARTS = 100
MOST_HEADERS = 200
HEADER_CHARS = 16_000


class Refused(AnymailWebhookValidationFailure):
    """A signed post the desk will not take; `reason` is the metric's label."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class WholeForm(FileUploadHandler):
    """Parses a multipart form of up to `limit` bytes in place of Django's parser, whose limit per
    field is site-wide (Mailgun posts the whole email as one field)."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        data = input_data.read(self.limit + 1)
        if len(data) > self.limit:
            raise RequestDataTooBig(f"the body is over {self.limit} bytes")
        # Django's limits on fields and files, which its own parser keeps and this one replaces:
        # the email package parses 30,000 one-byte fields in 9 s.
        most = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + settings.DATA_UPLOAD_MAX_NUMBER_FILES
        if data.count(b"--" + boundary) > most + 1:  # and the closing line
            raise MultiPartParserError(f"the form has more than {most} fields and files")
        head = f"Content-Type: {META.get('CONTENT_TYPE', '')}\r\n\r\n".encode()
        form = BytesParser(EmailMessage, policy=HTTP).parsebytes(head + data)
        if not form.is_multipart():
            raise MultiPartParserError("the multipart body has no parts")
        post, files = QueryDict(mutable=True), MultiValueDict[str, SimpleUploadedFile]()
        for part in form.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if not isinstance(name, str):
                continue
            content = part.get_payload(decode=True)
            content = content if isinstance(content, bytes) else b""
            filename = part.get_filename()
            if filename is None:
                post.appendlist(name, content.decode(encoding or "utf-8", errors="replace"))
            else:
                upload = SimpleUploadedFile(filename, content, part.get_content_type())
                files.appendlist(name, upload)
        return post, files


class MailgunInbound(MailgunInboundWebhookView):
    """anymail's view of Mailgun's inbound routes, on a bounded part of the email."""

    def esp_to_anymail_event(self, request):
        post, unread = request.POST.copy(), list[str]()
        if "body-mime" in post:
            post["body-mime"], unread = _first_parts(post["body-mime"])
        elif "message-headers" in post:  # the parsed route, as anymail tells them apart
            post["message-headers"], unread = _first_headers(post["message-headers"])
        request.POST = post
        event = super().esp_to_anymail_event(request)
        event.message.unread = " ".join(unread)
        return event


def _first_parts(mime: str) -> tuple[str, list[str]]:
    """The raw MIME up to its MOST_PARTS-th part, and what was not read."""
    for count, found in enumerate(re.finditer(r"^--", mime, flags=re.MULTILINE)):
        if count > MOST_PARTS:
            return mime[: found.start()], [f"Only its first {MOST_PARTS} MIME parts were read."]
    return mime, []


def _first_headers(written: str) -> tuple[str, list[str]]:
    """Mailgun's parsed headers, bounded, each on one line (a CR/LF in a display name makes the
    email package refuse the whole email); and what was not read."""
    headers = json.loads(written)
    pairs = [
        [re.sub(r"[\r\n]+", " ", str(one)) for one in header]
        for header in (headers if isinstance(headers, list) else [])
        if isinstance(header, list) and len(header) == 2
    ]
    kept = [[one[:HEADER_CHARS] for one in pair] for pair in pairs[:MOST_HEADERS]]
    said = (
        f"Only its first {MOST_HEADERS} headers were read, up to {HEADER_CHARS:,} characters each."
    )
    return json.dumps(kept), [said] if kept != pairs else []


@receiver(tracking, dispatch_uid="intake.webhook.tracking_signed_once")
def signed_once(sender: Any, event: AnymailEvent, esp_name: str, **kwargs: Any) -> None:
    """Refuse a signature too old or used already. In the transaction of what the post records:
    a refusal undoes what another receiver recorded; of two posts of one signature at once, one
    inserts the token's row."""
    if esp_name not in SIGNS_TIMESTAMP_AND_TOKEN:
        return
    now = timezone.now()
    window = timedelta(seconds=settings.INBOUND_SIGNATURE_MAX_AGE_SECONDS)
    signed_at = _signed_at(event)
    if signed_at is None or abs(now - signed_at) > window:
        raise Refused(
            f"The signature's timestamp ({signed_at.isoformat()}) is more than "
            f"{window.total_seconds():.0f} s from now."
            if signed_at
            else "The signature's timestamp is not a time.",
            reason="stale",
        )
    SignatureToken.objects.filter(signed_at__lt=now - window).delete()  # refused by age anyway
    _, first = SignatureToken.objects.get_or_create(
        token=event.event_id or "", defaults={"signed_at": signed_at}
    )
    if not first:
        raise Refused("This signature was used already.", reason="replayed")


def _signed_at(event: AnymailEvent) -> datetime | None:
    """When the post was signed: Mailgun's JSON (tracking) posts sign a time of their own."""
    block = event.esp_event.get("signature") if isinstance(event.esp_event, dict) else None
    if not isinstance(block, dict):
        return event.timestamp
    try:
        return datetime.fromtimestamp(int(block["timestamp"]), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):  # signed, yet not a time
        return None


def door(view: Callable[..., HttpResponseBase], *, max_bytes: str | None = None):
    """`view` behind the door; bodies over the setting `max_bytes` get a 413 unparsed."""

    @wraps(view)  # keeps anymail's csrf_exempt
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        limit = getattr(settings, max_bytes or "DATA_UPLOAD_MAX_MEMORY_SIZE")
        try:
            if max_bytes:
                try:
                    length = int(request.META.get("CONTENT_LENGTH") or 0)
                except ValueError:
                    why = "The Content-Length is not a number."
                    return _refused(request, 400, "malformed", why)
                if length > limit:
                    raise RequestDataTooBig
                request.upload_handlers = [WholeForm(request, limit)]
            return view(request, *args, **kwargs)
        except RequestDataTooBig:
            why = f"The request body is too large (at most {limit} bytes)."
            return _refused(request, 413, "too_large", why)
        except Refused as exc:
            return _refused(request, 400, exc.reason, str(exc))
        except AnymailWebhookValidationFailure as exc:
            return _refused(request, 400, "signature", str(exc))
        except MALFORMED as exc:
            why = str(exc) if isinstance(exc, AnymailConfigurationError) else repr(exc)
            return _refused(request, 400, "malformed", f"The post is not the provider's: {why}")

    return guarded


def _refused(request: HttpRequest, status: int, reason: str, message: str) -> HttpResponse:
    """One WARNING line with why, no traceback, counted by reason."""
    metrics.INBOUND_REFUSED.labels(reason=reason).inc()
    log.warning("%s %s refused (%s): %s", request.method, request.path, status, message[:300])
    code = {400: "bad_request", 413: "payload_too_large"}[status]
    return JsonResponse({"status": status, "code": code, "error": message}, status=status)
