"""The warehouse's word on a return, in the demo: the goods of an order's waiting return came
back (all of them, or the lines given), or something is wrong with them (--flag). It goes through
the one service every door calls (refunds.services.return_arrived), as the webhook's post would;
the demo has no warehouse to sign one, so without this a new user could approve a refund on
return and never see the goods come back."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from refunds import selectors, services
from refunds.models import ReturnRequest
from refunds.services.returns import Status


class Command(BaseCommand):
    help = (
        "Say, as the warehouse, what came back of an order's waiting return (the demo only): "
        "everything asked back, the --lines given, or --flag it with a reason."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("order", help="the order number whose return waits (1095)")
        parser.add_argument(
            "--lines",
            default="",
            metavar="LINExN,...",
            help="what came back, by line id or SKU and units: 11x2,12x1 or VASE-01x1 "
            "(left out: everything asked back)",
        )
        parser.add_argument("--flag", default="", metavar="REASON", help="flag it: what is wrong")

    def handle(self, *args, order: str, lines: str, flag: str, **_) -> None:
        if not (settings.DEMO and settings.DEBUG):
            # As demo_reply: a made-up word on goods never moves money on a real desk.
            raise CommandError(
                "demo_return runs only in the demo (REFUNDS_DEMO=true, as bin/run sets); in "
                "production the warehouse's webhook or the returns page (/returns/) say it."
            )
        waiting = (
            ReturnRequest.objects.filter(
                ticket__links__order__number=order, arrived_at=None, early__isnull=True
            )
            .order_by("-asked_at", "-pk")
            .first()
        )
        if waiting is None:
            raise CommandError(f"No return of order {order} waits for its goods.")
        if flag and lines:
            raise CommandError("A flagged return carries a reason, not --lines: give one of them.")
        status: Status = "flagged" if flag else "received"
        try:
            arrival = services.return_arrived(
                reference=waiting.reference,
                status=status,
                lines=_backs(lines, order) if lines else None,
                reason=flag,
                source="demo_return",
            )
        except services.RefundError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(selectors.arrival_words(arrival, status))


def _backs(text: str, order: str) -> list[services.Back]:
    """`11x2,SKU-1x1`: a line id or SKU, "x", its units that came back."""
    backs = []
    for one in text.split(","):
        name, _, count = one.strip().rpartition("x")
        if not name or not count.isdigit():
            raise CommandError(
                f"--lines: “{one.strip()[:40]}” is not a line and its units, such as 11x2 or "
                "SKU-1x1."
            )
        line = int(name) if name.isdigit() else None
        backs.append(
            services.Back(quantity=int(count), line=line, sku="" if line else name, order=order)
        )
    return backs
