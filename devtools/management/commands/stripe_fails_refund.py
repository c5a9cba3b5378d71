"""`manage.py stripe_fails_refund <ticket or re_...>`: on the demo's localstripe, Stripe fails a
refund the desk made (the card was closed), as Stripe does days later, and tells the desk by its
events. Demo only.

localstripe cannot fail a refund, so its launcher (devtools/localstripe.py) marks the refund
`failed` in the emulator's store: from then on every read of it says so, the desk's re-read
included. This command then signs the events Stripe would send (`refund.failed`,
`charge.refund.updated`) with the webhook's secret, as Stripe signs them, and posts them to the
desk's own endpoint; the desk's worker takes it from there, as it would from Stripe. With the
demo on localstripe running (`localstripe_demo --port 8421`, `PORT=8056 bin/run`):

    REFUNDS_DEMO=true DEBUG=true .venv/bin/python manage.py stripe_fails_refund 7 \\
      --port 8421 --desk http://127.0.0.1:8056
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from devtools.localstripe import DEMO_WEBHOOK_SECRET, FAILURE_REASONS, LocalStripe

WEBHOOK_PATH = "/payments/stripe/webhook/"


class Command(BaseCommand):
    help = "Demo only: localstripe fails a refund the desk made and tells the desk, as Stripe."

    def add_arguments(self, parser) -> None:
        parser.add_argument("refund", help="a ticket's number (its page's) or a refund's re_ id")
        parser.add_argument("--reason", choices=FAILURE_REASONS, default=FAILURE_REASONS[0])
        parser.add_argument("--port", type=int, default=8420, help="localstripe_demo's port")
        parser.add_argument(
            "--desk",
            default=f"http://127.0.0.1:{os.environ.get('PORT') or 8000}",
            help="the desk bin/run serves (its webhook gets the events)",
        )

    def handle(self, *args, refund: str, reason: str, port: int, desk: str, **options) -> None:
        if not (settings.DEMO and settings.DEBUG):
            raise CommandError(
                "stripe_fails_refund fails a refund and posts signed events to the desk: "
                "demo only (REFUNDS_DEMO=true, as bin/run sets it), on localstripe"
            )
        refund_id = refund if refund.startswith("re_") else _refund_of_ticket(refund)
        server = LocalStripe(settings.DATA_DIR, port=port)
        try:
            events = server.fail_refund(refund_id, reason)
        except urllib.error.HTTPError as exc:
            raise CommandError(f"localstripe refused: {_error(exc)}") from None
        except OSError as exc:
            raise CommandError(
                f"localstripe does not answer on {server.url} ({exc}): is "
                f"`manage.py localstripe_demo --port {port}` running?"
            ) from None
        self.stdout.write(f"localstripe: refund {refund_id} failed ({reason}).")
        secret = settings.STRIPE_WEBHOOK_SECRET or DEMO_WEBHOOK_SECRET
        url = desk.rstrip("/") + WEBHOOK_PATH
        for event in events:
            status, said = _post_signed(url, event, secret)
            self.stdout.write(f"{event['type']} {event['id']} -> {url}: {status} {said}")
            if status == 503:
                raise CommandError(
                    "The desk takes no events without STRIPE_WEBHOOK_SECRET: start bin/run with "
                    f"STRIPE_WEBHOOK_SECRET={secret} (localstripe_demo prints the whole line)"
                )
            if status != 200:
                raise CommandError(f"The desk refused {event['type']}: {status} {said}")
        self.stdout.write(
            "The desk's worker re-reads the refund from localstripe and, as it now says failed, "
            "gives the money back to the order's balance and the ticket to a manager."
        )


def _refund_of_ticket(number: str) -> str:
    """The refund a ticket made at the processor that has not failed yet: its only one, or the
    newest when asked again after a failure; a ticket of several orders names them instead."""
    from refunds.models import Charge, Ticket
    from refunds.statuses import PROCESSOR_GAVE_BACK

    if not number.isdigit() or not Ticket.objects.filter(pk=int(number)).exists():
        raise CommandError(f"No ticket {number!r}: give a ticket's number or a refund's re_ id")
    live = (
        Charge.objects.filter(ticket_id=int(number), status=Charge.Status.SUCCEEDED)
        .exclude(receipt=None)
        .exclude(processor_status__in=PROCESSOR_GAVE_BACK)
        .order_by("pk")
    )
    receipts = list(live.values_list("receipt", flat=True))
    if not receipts:
        raise CommandError(f"Ticket {number} has no refund at the processor that could fail")
    if len({c.order_id for c in live}) > 1:
        raise CommandError(
            f"Ticket {number} refunded several orders; name one refund: {', '.join(receipts)}"
        )
    return str(receipts[-1])


def _post_signed(url: str, event: dict[str, Any], secret: str) -> tuple[int, str]:
    """Post `event` as Stripe posts it: the exact bytes, signed in `Stripe-Signature` with an
    HMAC-SHA256 of "time.payload" under the endpoint's secret (what stripe.Webhook checks)."""
    payload = json.dumps(event).encode()
    at = int(time.time())
    mac = hmac.new(secret.encode(), b"%d.%s" % (at, payload), hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        url,
        data=payload,
        method="POST",
        headers={"Content-Type": "application/json", "Stripe-Signature": f"t={at},v1={mac}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        raise CommandError(f"The desk does not answer at {url} ({exc}): is bin/run up?") from None


def _error(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"{exc.code} {exc.reason}"
