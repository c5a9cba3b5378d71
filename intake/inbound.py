"""Email in, through django-anymail's inbound signal. A signed email is never refused (the
customer already sent it): its faults send it to "Needs sorting"."""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import UTC, datetime, timedelta
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from email.policy import default
from email.utils import getaddresses

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
from intake.webhook import HEADER_CHARS, signed_once

log = logging.getLogger(__name__)
# Providers retry a delivery for up to 3 days: an unsigned time older than this is not the email's.
PLAUSIBLE_AGE = timedelta(days=7)
# Work per email is bounded: the email package reads a References of 70,000 IDs in 15 s.
MOST_ADDRESSES = 100
MOST_IDS = 100
ID = re.compile(r"<[^<>\s]+>")
VERDICT_HEADERS = {
    "x-mailgun-spf": "spf",
    "received-spf": "spf",
    "x-mailgun-dkim-check-result": "dkim",
}
VERDICT = re.compile(r"(?<![\w.-])(spf|dkim)\s*=\s*(\w+)", re.IGNORECASE)
# Refolding a long header parses it (seconds, or an error on CR/LF in an encoded display name).
AS_IT_CAME = default.clone(refold_source="none")


@receiver(inbound, dispatch_uid="intake.inbound.message_in")
def message_in(sender, event: AnymailInboundEvent, esp_name: str, **kwargs) -> None:
    email = event.message
    if email is None:  # an ESP's event without a message: nothing a customer wrote
        log.warning("inbound %s event %s carried no message", esp_name, event.event_id)
        return
    parts = _set_aside(email)
    raw = _raw(email)
    sender, name = _from(email)
    recipients, to_cut = _recipients(email)
    references, ids_cut = _references(email)
    key = _key(email, raw, sender)
    about, kept = attachments.attachments_judge(parts, key=key)
    attachments.attachments_store(kept)  # before the row that names them: see the module
    with transaction.atomic():  # the token is taken only with the message it brought
        signed_once(None, event, esp_name)
        message, created = message_receive(
            channel=Message.Channel.EMAIL,
            key=key,
            sender=sender,
            sender_name=name,
            subject=_words(_written(email, "subject")[:HEADER_CHARS]),
            body=body_text(email),
            received_at=_received_at(event.timestamp),
            raw=raw,
            message_id=email.get("Message-ID") or "",
            attachments=about,
            recipients=recipients,
            references=references,
            verdicts=_verdicts(email),
            unread=" ".join(filter(None, [getattr(email, "unread", ""), to_cut, ids_cut])),
        )
        if created:
            attachments.attachments_record(message, kept)
    log.info("inbound %s: message %s (%s)", esp_name, message.pk, "new" if created else "again")


def _written(email: AnymailInboundMessage, name: str) -> str:
    """A header's values as written, unparsed; an undecodable byte is a replacement character."""
    return " ".join(
        value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        for key, value in email.raw_items()
        if key.lower() == name
    )


def _recipients(email: AnymailInboundMessage) -> tuple[list[str], str]:
    """Where it was sent, the envelope's recipient (the reply address) first; and what was cut."""
    written = [_written(email, name) for name in ("to", "cc", "delivered-to")]
    read = getaddresses([one[:HEADER_CHARS] for one in written])
    found = [one for one in [email.envelope_recipient or ""] + [a for _, a in read] if one]
    if len(found) <= MOST_ADDRESSES and all(len(one) <= HEADER_CHARS for one in written):
        return found, ""
    said = f"Only the first {MOST_ADDRESSES} addresses it was sent to were read."
    return found[:MOST_ADDRESSES], said


def _references(email: AnymailInboundMessage) -> tuple[list[str], str]:
    """In-Reply-To and the end of References (a reply appends the ID it answers); what was cut."""
    answers = ID.findall(_written(email, "in-reply-to")[:HEADER_CHARS])
    written = _written(email, "references")
    references = ID.findall(written[-HEADER_CHARS:])
    if len(answers) <= MOST_IDS and len(references) <= MOST_IDS and len(written) <= HEADER_CHARS:
        return answers + references, ""
    return answers[:MOST_IDS] + references[-MOST_IDS:], (
        f"Only the last {MOST_IDS} Message-IDs of its References were read."
    )


def _verdicts(email: AnymailInboundMessage) -> dict[str, str]:
    """The provider's SPF and DKIM verdicts, the first of each: a receiver adds its results
    above the ones it received, so any the sender wrote in are below the provider's."""
    found: dict[str, str] = {}
    for name, value in email.raw_items():
        written = str(value)[:HEADER_CHARS].lower()
        if name.lower() in VERDICT_HEADERS:
            found.setdefault(VERDICT_HEADERS[name.lower()], (written.split() or [""])[0])
        elif name.lower() == "authentication-results":
            for check, verdict in VERDICT.findall(written):
                found.setdefault(check, verdict)
    return found


def _received_at(stamp: datetime | None) -> datetime:
    """The provider's time of the email, unless it is absurd: then now."""
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
    """The message's plain text, or its HTML's."""
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
    """(address, display name) of the From; anything else is kept as written."""
    written = _written(email, "from")[:HEADER_CHARS]
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
    """The Message-ID with the sender (another sender reusing the ID is another message), or
    else the message's bytes (a redelivery repeats them)."""
    message_id = " ".join((email.get("Message-ID") or "").split())
    if not message_id:
        return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()
    return f"{message_id} from {sender.lower()}"


def _set_aside(email: AnymailInboundMessage) -> list[attachments.Part]:
    """The attached parts, taken out: each leaves a line naming its digest in the raw MIME."""
    parts = []
    for part in email.walk():
        if part.is_multipart() or not (
            part.is_attachment() or part.get_content_maintype() != "text"
        ):
            continue
        content = part.get_payload(decode=True)
        content = content if isinstance(content, bytes) else b""
        name = " ".join((part.get_filename() or "").replace("\x00", " ").split())
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
        return email.as_bytes(policy=AS_IT_CAME).decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - a message Python cannot flatten is kept in words
        headers = "".join(f"{name}: {value}\n" for name, value in email.raw_items())
        return f"(the raw message could not be flattened)\n{headers}"
