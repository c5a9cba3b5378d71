"""Email in: the mail provider's inbound webhook, through django-anymail. anymail's ESP view
(mounted under /mail/, e.g. /mail/mailgun/inbound/) checks the provider's signature and refuses
a bad one before anything here runs; this receiver turns the message into a Message.

An email is never refused once signed: the customer already sent it. Its faults (no text, too
long, a From that is no address) send it to "Needs sorting" (intake/services.py). Text in a
charset that does not decode is kept with replacement characters; the raw MIME is kept too."""

from __future__ import annotations

import hashlib
import logging

from anymail.exceptions import AnymailInvalidAddress
from anymail.inbound import AnymailInboundMessage
from anymail.signals import AnymailInboundEvent, inbound
from django.dispatch import receiver
from django.utils import timezone
from django.utils.html import strip_tags

from intake.models import Message
from intake.services import message_receive

log = logging.getLogger(__name__)


@receiver(inbound, dispatch_uid="intake.inbound.message_in")
def message_in(sender, event: AnymailInboundEvent, esp_name: str, **kwargs) -> None:
    email = event.message
    if email is None:  # an ESP's event without a message: nothing a customer wrote
        log.warning("inbound %s event %s carried no message", esp_name, event.event_id)
        return
    raw = _raw(email)
    sender, name = _from(email)
    message, created = message_receive(
        channel=Message.Channel.EMAIL,
        key=_key(email, raw),
        sender=sender,
        sender_name=name,
        subject=email.subject or "",
        body=body_text(email),
        received_at=event.timestamp or timezone.now(),
        raw=raw,
    )
    log.info("inbound %s: message %s (%s)", esp_name, message.pk, "new" if created else "again")


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
    """(address, display name) of the From; a From that is no address is kept as written, and
    the message goes to "Needs sorting" saying so."""
    try:
        address = email.from_email
    except AnymailInvalidAddress:
        return (email.get("From") or "").strip(), ""
    if address is None:
        return "", ""
    return address.addr_spec, address.display_name


def _key(email: AnymailInboundMessage, raw: str) -> str:
    """The sender's Message-ID; without one, the message's own bytes (a redelivery repeats
    them)."""
    message_id = (email.get("Message-ID") or "").strip()
    return message_id or "sha256:" + hashlib.sha256(raw.encode()).hexdigest()


def _raw(email: AnymailInboundMessage) -> str:
    try:
        return email.as_bytes().decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - a message Python cannot flatten is kept in words
        return f"(the raw message could not be flattened)\n{email.get('From', '')}\n"
