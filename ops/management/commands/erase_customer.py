"""Forget a customer, for an operator: the same request as an admin's on the customer's page."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from pydantic_core import PydanticCustomError

from api.bodies import email_address
from ops.erasure import erasure_request


class Command(BaseCommand):
    help = (
        "Erase what the desk keeps of the customer writing from EMAIL (naming --order N, each "
        "theirs); a worker runs it: watch /ops/erasures/."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email")
        parser.add_argument(
            "--order",
            action="append",
            default=[],
            dest="orders",
            metavar="N",
            help="an order number of theirs to name (again for more)",
        )

    def handle(self, *args, email: str, orders: list[str], **options) -> None:
        try:
            erasure = erasure_request(
                email=email_address(email), orders=orders, by="operator (manage.py)"
            )
        except PydanticCustomError as exc:
            raise CommandError(f"{email!r} {exc.message()}; nothing was erased.") from None
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        self.stdout.write(
            f"Erasure {erasure.pk} ({erasure.get_status_display().lower()}) forgets {email}. "
            "A worker runs it; watch it at /ops/erasures/ (its report, or the open tickets it "
            "waits for)."
        )
