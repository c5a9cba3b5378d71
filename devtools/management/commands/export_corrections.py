"""What reviewers chose for messages the reader did not settle, as labelled lines for eval_intake.

    python manage.py export_corrections [--output FILE] [--all]

A message counts when a person chose its reading: sorted it into a ticket (the orders and the
reason chosen), or set it aside as not a refund request (not about a refund, with the orders the
reader read), including one a reviewer sent back with "Misread? Send back" and someone sorted
again (the reading chosen then). A message sent back and not sorted again, or whose set-aside
was undone, has no reading chosen yet and is left out. By default only lines where the chosen
reading differs from the reader's are written; --all writes every message a person sorted.
Email addresses (the sender, and any in the subject or body) are masked the same way throughout.
Each line also says what the reader read ("read_reason", "read_orders") and the message's id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from devtools.evaluation import Masker, labelled_line
from intake.models import Message, MessageEvent
from refunds import policy

CHOSEN = (MessageEvent.Action.SORT, MessageEvent.Action.NOT_REFUND)
UNDONE = (MessageEvent.Action.SEND_BACK, MessageEvent.Action.UNDO_NOT_REFUND)


class Command(BaseCommand):
    help = "Write what reviewers corrected as labelled lines in eval_intake's format."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", default="", help="a file to write (default: standard out)")
        parser.add_argument(
            "--all", action="store_true", help="every message a person sorted, not only misreads"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        masker = Masker()
        lines = [
            line
            for message in Message.objects.filter(events__action__in=CHOSEN)
            .distinct()
            .order_by("pk")
            .prefetch_related("events")
            if (line := _line(message, masker, every=options["all"]))
        ]
        text = "".join(f"{line}\n" for line in lines)
        if options["output"]:
            Path(options["output"]).write_text(text, encoding="utf-8")
            self.stderr.write(f"{len(lines)} labelled messages written to {options['output']}")
        else:
            self.stdout.write(text, ending="")


def _line(message: Message, masker: Masker, *, every: bool) -> str:
    last = next(
        (e for e in reversed(list(message.events.all())) if e.action in CHOSEN + UNDONE), None
    )
    if last is None or last.action not in CHOSEN:
        return ""  # sent back or undone since: no reading chosen yet
    read = message.reading or {}
    read_reason = read.get("reason", "")
    read_orders = [str(o).lstrip("#").strip() for o in read.get("orders") or []]
    if last.action == MessageEvent.Action.SORT:
        reason = last.answer.get("reason", "")
        orders = [str(o) for o in last.answer.get("orders") or []]
    else:
        reason, orders = policy.NOT_REFUND, read_orders
    if reason not in policy.REASONS:
        return ""
    corrected = reason != read_reason or sorted(orders) != sorted(read_orders)
    if not (corrected or every):
        return ""
    return labelled_line(
        sender=masker.address(message.sender),
        subject=masker.text(message.subject),
        body=masker.text(message.body),
        orders=orders,
        reason=reason,
        read_reason=read_reason,
        read_orders=read_orders,
        message=message.pk,
    )
