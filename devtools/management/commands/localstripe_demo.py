"""`manage.py localstripe_demo`: the demo refunds through StripeGateway, against localstripe (a
Stripe emulator, devtools/localstripe.py) on this machine instead of Stripe. Demo only.

It starts localstripe on 127.0.0.1 (port 8420 unless --port), loads the demo data and the demo
customers' messages with their orders (the workers read them once `bin/run` starts), gives every
order a PaymentIntent there that the customer paid (what the order says was paid, or for an
order without lines $50.00 of goods plus the shipping fee; localstripe
keeps nothing across restarts, so each start gives new ones), prints the settings that point the
desk at it (the demo's webhook secret among them, for `stripe_fails_refund`'s events), and serves
until stopped. Then, in another terminal:

    REFUNDS_GATEWAY=refunds.payments.StripeGateway STRIPE_API_BASE=http://127.0.0.1:8420 \\
      STRIPE_SECRET_KEY=sk_test_localstripe_0000000000 \\
      STRIPE_WEBHOOK_SECRET=whsec_localstripe_demo_0000000000 bin/run
"""

from __future__ import annotations

import signal

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from devtools.localstripe import DEMO_WEBHOOK_SECRET, LocalStripe

GOODS_CENTS = 5000  # what a customer of an order without lines paid besides the shipping fee


class Command(BaseCommand):
    help = "Run localstripe for the demo and give the demo orders payments there."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=8420)

    def handle(self, *args, port: int, **options) -> None:
        from refunds.models import Order

        if not (settings.DEMO and settings.DEBUG):
            raise CommandError(
                "localstripe_demo rewrites every order's payment reference: demo only "
                "(REFUNDS_DEMO=true, as bin/run sets it)"
            )
        call_command("migrate", verbosity=0)
        call_command("demo_data")
        call_command("demo_messages")  # its customers' orders too (the smashed vase, the empty box)
        server = LocalStripe(settings.DATA_DIR, port=port).start()
        # Stopped as by Ctrl-C (a supervisor's or a test's terminate): localstripe stops with it
        # rather than going on serving, orphaned, on the port.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            orders = Order.objects.order_by("number")
            for order in orders:
                paid = order.paid_cents
                if paid is None:
                    paid = GOODS_CENTS + order.shipping_fee_cents
                order.payment_reference = server.payment_intent(
                    paid, order.currency.lower() or "usd"
                )
                order.save(update_fields=["payment_reference"])
            settings_for_desk = server.env() | {"STRIPE_WEBHOOK_SECRET": DEMO_WEBHOOK_SECRET}
            env = " ".join(f"{name}={value}" for name, value in settings_for_desk.items())
            self.stdout.write(
                f"localstripe on {server.url}: {orders.count()} demo orders paid there.\n"
                f"Start the desk against it with:\n    {env} bin/run\n"
                "Once a ticket is refunded, Stripe can fail its refund later (a closed card):\n"
                f"    REFUNDS_DEMO=true DEBUG=true .venv/bin/python manage.py stripe_fails_refund "
                f"<ticket> --port {port} --desk http://127.0.0.1:<the desk's port>",
            )
            self.stdout.flush()
            assert server.proc is not None
            server.proc.wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
