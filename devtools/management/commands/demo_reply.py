"""The customer's reply to a reviewer's question, in the demo: an email built as the customer's
mail client would (to the question's reply address, In-Reply-To the question, the files given
attached) and handed to the inbound path as the mail provider's webhook would (anymail's
`inbound` signal, so the receiver, its attachment checks and its matching run as in production).
The demo has no provider to sign a post to /mail/mailgun/inbound_mime/, so without this a new
user could ask a question and never see it answered."""

from __future__ import annotations

import mimetypes
import uuid
from pathlib import Path

from anymail.inbound import AnymailInboundMessage
from anymail.signals import AnymailInboundEvent, EventType, inbound
from django.conf import settings
from django.core.mail import EmailMessage
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from intake.models import Message
from refunds import mail
from refunds.models import CustomerQuestion, Email


class Command(BaseCommand):
    help = (
        "Reply as the customer to the last question asked about an order, through the inbound "
        "webhook's path (the demo only)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("order", help="the order number of the ticket that asked (1095)")
        parser.add_argument("text", help="what the customer writes")
        parser.add_argument(
            "--attach", action="append", default=[], metavar="FILE", help="a file to attach"
        )
        parser.add_argument(
            "--sender", default="", help="another From address (the customer's by default)"
        )
        parser.add_argument(
            "--to", default="", help="another reply address (the question's by default)"
        )

    def handle(self, *args, order: str, text: str, attach: list[str], sender: str, to: str, **_):
        if not (settings.DEMO and settings.DEBUG):
            # The same guard as demo_data: a made-up customer's email never enters a real desk.
            raise CommandError(
                "demo_reply runs only in the demo (REFUNDS_DEMO=true, as bin/run sets); in "
                "production replies come through the mail provider's inbound webhook."
            )
        question = (
            CustomerQuestion.objects.filter(ticket__links__order__number=order)
            .select_related("ticket__order")
            .order_by("-asked_at", "-pk")
            .first()
        )
        if question is None:
            raise CommandError(f"No question was asked about order {order}.")
        files = [Path(name) for name in attach]
        for path in files:
            if not path.is_file():
                raise CommandError(f"No such file: {path}")
        asked = Email.objects.filter(key=question.email_key).first()
        message_id = f"<demo-reply-{uuid.uuid4().hex}@customer.example.com>"
        email = EmailMessage(
            subject=f"Re: {asked.subject}" if asked else "Re: your question",
            body=text,
            from_email=sender or question.ticket.order.customer_email,
            to=[to or mail.reply_address(question.token)],
            headers={
                "Message-ID": message_id,
                "In-Reply-To": question.message_id,
                "References": question.message_id,
            },
        )
        for path in files:
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            email.attach(path.name, path.read_bytes(), kind)
        raw = email.message().as_bytes()
        event = AnymailInboundEvent(
            event_type=EventType.INBOUND,
            timestamp=timezone.now(),
            event_id=f"demo-{uuid.uuid4().hex}",
            message=AnymailInboundMessage.parse_raw_mime_bytes(raw),
        )
        inbound.send(sender=type(self), event=event, esp_name="Demo")
        self.stdout.write(_said(Message.objects.get(message_id=message_id)))


def _said(message: Message) -> str:
    """What became of the reply, in the words the desk's pages use."""
    head = f"Message {message.pk} from {message.sender}"
    if message.resumed_wait:
        return (
            f"{head} answers the question on ticket {message.ticket_id}: a worker brings the "
            "review back to the queue with the reply quoted."
        )
    if message.ticket_id:
        return f"{head} joined ticket {message.ticket_id}'s timeline. {message.sorting_reason}"
    return f"{head}: {message.get_status_display()}. {message.sorting_reason}".strip()
