"""Email in: the mail provider's inbound webhook, through django-anymail. anymail's ESP view
(mounted under /mail/ behind intake/webhook.py's door, e.g. /mail/mailgun/inbound_mime/) checks
the provider's signature and refuses a bad one before anything here runs; this receiver refuses a
signature that is stale or used already (what anymail leaves to the app; intake/webhook.py's
signed_once, as for the tracking posts) and turns the message into a Message.

An email is never refused once signed: the customer already sent it. Its faults (no text, too
long, a From that is no address) send it to "Needs sorting" (intake/services.py). Text in a
charset that does not decode is kept with replacement characters; the raw MIME is kept too, with
each attachment taken out and a line in its place. Attachments are judged and the kept ones
written to storage before the message's transaction (intake/attachments.py), and recorded with
the message."""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import UTC, datetime, timedelta
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from email.utils import getaddresses

from anymail.exceptions import AnymailInvalidAddress
from anymail.inbound import AnymailInboundMessage
from anymail.signals import AnymailInboundEvent, inbound
from django.conf import settings
from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone
from django.utils.html import strip_tags

from intake import attachments
from intake.models import Message
from intake.services import message_receive
from intake.webhook import signed_once

log = logging.getLogger(__name__)
# Providers retry a delivery for hours (Mailgun 8 h, others up to 3 days): an unsigned time
# older than this, or in the future, is not when the email came; the time it reached us is.
PLAUSIBLE_AGE = timedelta(days=7)


@receiver(inbound, dispatch_uid="intake.inbound.message_in")
def message_in(sender, event: AnymailInboundEvent, esp_name: str, **kwargs) -> None:
    email = event.message
    if email is None:  # an ESP's event without a message: nothing a customer wrote
        log.warning("inbound %s event %s carried no message", esp_name, event.event_id)
        return
    parts = _set_aside(email)
    raw = _raw(email)
    sender, name = _from(email)
    key = _key(email, raw, sender)
    about, kept = attachments.attachments_judge(parts, key=key)
    attachments.attachments_store(kept)  # before the row that names them: see the module
    with transaction.atomic():  # the token is taken only with the message it brought
        signed_once(event, esp_name)
        message, created = message_receive(
            channel=Message.Channel.EMAIL,
            key=key,
            sender=sender,
            sender_name=name,
            subject=email.subject or "",
            body=body_text(email),
            received_at=_received_at(event.timestamp),
            raw=raw,
            message_id=email.get("Message-ID") or "",
            attachments=about,
            recipients=_recipients(email),
            references=_references(email),
        )
        if created:
            attachments.attachments_record(message, kept)
    log.info("inbound %s: message %s (%s)", esp_name, message.pk, "new" if created else "again")


def _recipients(email: AnymailInboundMessage) -> list[str]:
    """Where it was sent: the envelope's recipient first (the reply address, whatever the
    headers say), then To, Cc and Delivered-To."""
    found = [email.envelope_recipient or ""]
    for header in ("To", "Cc", "Delivered-To"):
        try:
            found += [a.addr_spec for a in email.get_address_header(header)]
        except (AnymailInvalidAddress, ValueError, IndexError):
            continue
    return [one for one in found if one]


def _references(email: AnymailInboundMessage) -> list[str]:
    """The Message-IDs it answers: In-Reply-To, then References."""
    written = " ".join(email.get_all("In-Reply-To", []) + email.get_all("References", []))
    return re.findall(r"<[^<>\s]+>", written)


def _received_at(stamp: datetime | None) -> datetime:
    """The provider's time of the email, unless it is absurd (year 1, next year): then now."""
    now = timezone.now()
    if stamp is not None and timezone.is_naive(stamp):
        stamp = stamp.replace(tzinfo=UTC)
    window = timedelta(seconds=settings.INBOUND_SIGNATURE_MAX_AGE_SECONDS)
    if stamp is None or not now - PLAUSIBLE_AGE <= stamp <= now + window:
        if stamp is not None:
            log.warning("inbound email stamped %s: taken as received now", stamp.isoformat())
        return now
    return stamp


def body_text(email: AnymailInboundMessage) -> str:
    """The message's plain text, or its HTML's text; a charset that does not decode is read
    as UTF-8 with replacement characters rather than lost."""
    for content_type in ("text/plain", "text/html"):
        for part in email.walk():
            if part.get_content_type() != content_type or part.is_attachment():
                continue
            try:
                text = part.get_content_text()
            except LookupError:  # a charset Python does not know
                text = part.get_content_text(charset="utf-8")
            if text:
                return strip_tags(text) if content_type == "text/html" else text
    return ""


def _from(email: AnymailInboundMessage) -> tuple[str, str]:
    """(address, display name) of the From; a From that is not one address Python can read
    (several, none, CR/LF in its name, junk) is kept as written, and the message goes to
    "Needs sorting" saying so."""
    try:
        addresses = email.get_address_header("From")
    except (AnymailInvalidAddress, ValueError, IndexError):  # the email package's refusals
        addresses = []
    if len(addresses) == 1:
        return addresses[0].addr_spec, addresses[0].display_name
    written = " ".join(value for name, value in email.raw_items() if name.lower() == "from")
    found = getaddresses([written])  # the standard library's lenient reading
    if len(found) == 1 and "@" in found[0][1]:
        return found[0][1], _words(found[0][0])
    return " ".join(written.split()), ""


def _words(name: str) -> str:
    """A display name's encoded words decoded, on one line."""
    try:
        name = str(make_header(decode_header(name)))
    except (LookupError, UnicodeError, HeaderParseError):  # an unknown or lying charset
        pass
    return " ".join(name.split())


def _key(email: AnymailInboundMessage, raw: str, sender: str) -> str:
    """The sender's Message-ID with the sender's address (another sender's email that reuses
    the ID is another message); without one, the message's own bytes (a redelivery repeats
    them)."""
    message_id = " ".join((email.get("Message-ID") or "").split())
    if not message_id:
        return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()
    return f"{message_id} from {sender.lower()}"


def _set_aside(email: AnymailInboundMessage) -> list[attachments.Part]:
    """What is attached, taken out: each part that is no text of the message (a photo, a PDF, a
    file) leaves a line in its place in the raw MIME, naming its bytes' digest."""
    parts = []
    for part in email.walk():
        if part.is_multipart() or not (
            part.is_attachment() or part.get_content_maintype() != "text"
        ):
            continue
        content = part.get_payload(decode=True)
        content = content if isinstance(content, bytes) else b""
        name = " ".join((part.get_filename() or "").split())
        parts.append(attachments.Part(name, part.get_content_type(), content))
        digest = hashlib.sha256(content).hexdigest()
        del part["Content-Transfer-Encoding"]
        part.set_payload(
            f"(attachment {name or 'without a name'}, {len(content)} bytes, sha256 {digest}: "
            "kept apart, or refused, as the message's attachments say)\n"
        )
    return parts


def _raw(email: AnymailInboundMessage) -> str:
    try:
        return email.as_bytes().decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - a message Python cannot flatten is kept in words
        return f"(the raw message could not be flattened)\n{email.get('From', '')}\n"
