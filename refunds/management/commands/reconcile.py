from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from refunds import services
from refunds.models import ReconcileRun


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise CommandError(f"--since {value!r} is not a date (YYYY-MM-DD).") from None


class Command(BaseCommand):
    help = (
        "Compare the ledger with the payment processor for the orders charged or ticketed "
        "since a date: "
        "refunds made outside the desk (recorded), refunds missing on either side, amounts that "
        "differ, orders refunded past what was paid. Moves no money; saves the report (shown at "
        "/ops/reconcile/), emails the admins a problem and exits 1 when something is wrong."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since",
            help="YYYY-MM-DD (UTC); default: REFUNDS_RECONCILE_DAYS days ago",
        )

    def handle(self, *args, **options) -> None:
        if options["since"]:
            day = _day(options["since"])
            since = datetime(day.year, day.month, day.day, tzinfo=UTC)
            if since > timezone.now():  # it would check nothing and say all is well
                raise CommandError(f"--since {day} is in the future (UTC): nothing to check.")
        else:
            since = timezone.now() - timedelta(days=settings.REFUNDS_RECONCILE_DAYS)
        report = services.reconcile_payments(since=since, by=ReconcileRun.By.COMMAND)
        if report.wrong_gateway:
            raise CommandError(report.not_run)
        self.stdout.write("\n".join(report.lines()))
        if not report.ok:
            raise CommandError(
                f"{len(report.problems)} problem(s) between the ledger and the processor."
            )
