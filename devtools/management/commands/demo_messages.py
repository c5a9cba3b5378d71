"""A handful of customers' emails for the demo, handed to the intake as the inbound webhook
would (intake.services.message_receive, channel email), so a new user finds the intake at work:
a ticket it opened, one waiting for a manager, one covering three orders, three about what came
in the box (a smashed vase, a missing charger, an empty box: each a review that offers the
lines it calls for), and "Needs sorting" with two kinds of message.
Stable keys: a second run adds nothing."""

from __future__ import annotations

from datetime import date, timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from devtools.management.commands.demo_data import ORDERS, demo_email, demo_lines
from intake.services import message_receive
from refunds.models import Order

# demo_data keeps one customer per order (no repeat-refunder flags); the customer who writes
# without an order number needs several recent ones, so she gets two of her own, dated from today
# (the intake looks at the sender's orders of the last INTAKE_RECENT_ORDER_DAYS days).
SEVERAL = ("Iris Kwan", "iris@example.com", ["1090", "1091"])
# The customer who writes about three late orders at once (one ticket covers all three): his
# own orders too, (number, days late, shipping fee in cents), dated as demo_data's.
THREE = (
    "Tomás Reyes",
    "tomas@example.com",
    [("1092", 4, 899), ("1093", 2, 1450), ("1094", 6, 650)],
)


# Customers who write about what came in the box, each with an order of their own: (name,
# email, number, days late, shipping fee in cents, its lines as demo_data's BASKETS hold them).
BOXES = [
    (
        "Lucía Ferraro",
        "lucia@example.com",
        "1095",
        0,
        699,
        [
            ("VASE-CER-W", "Ceramic vase, white", 2400, 1, 0),
            ("CNDL-CDR", "Soy candle, cedar", 2400, 2, 0),
            ("RUN-LIN", "Linen table runner", 2450, 1, 0),
        ],
    ),
    (
        "Noah Berg",
        "noah@example.com",
        "1096",
        0,
        0,
        [
            ("LAP-14-16", "Laptop 14-inch, 16 GB", 89900, 1, 7192),
            ("CHG-65W", "USB-C charger 65 W (for the laptop)", 3999, 1, 320),
            ("SLV-14", "Laptop sleeve, 14-inch", 2450, 1, 196),
        ],
    ),
    (
        "Zoe Adler",
        "zoe@example.com",
        "1097",
        1,
        899,
        [
            ("TEE-NVY-M", "Cotton T-shirt, navy, M", 1800, 3, 0),
            ("JNS-32", "Straight jeans, 32/32", 5900, 1, 0),
        ],
    ),
]


def _customer(number: str) -> tuple[str, str]:
    if number in {own for own, _late, _fee in THREE[2]}:
        return THREE[0], THREE[1]
    for name, email, own, *_rest in BOXES:
        if number == own:
            return name, email
    name = next(name for n, name, _late, _fee in ORDERS if n == number)
    return name, demo_email(number, name)


# (key, order whose customer writes, subject, body, what the user will find)
MESSAGES = [
    (
        "demo-late-1044",
        "1044",
        "Late delivery, order 1044",
        "Hi, my order #1044 came two days after the date you promised. Could I get the "
        "shipping fee back? Thanks, Chloe",
        "a ticket for order 1044, in the agents' queue",
    ),
    (
        "demo-damaged-1046",
        "1046",
        "Broken on arrival",
        "Hello, order 1046 arrived today and the box was crushed: the lamp inside is broken. "
        "I would like a refund please. Eli",
        "a ticket for order 1046 that waits for a manager (damaged)",
    ),
    (
        "demo-no-order-iris",
        None,
        "Where is my refund?",
        "Hi, one of my parcels came late last week and I'd like the delivery charge back. Iris",
        "Needs sorting: no order number, and the sender has two recent orders",
    ),
    (
        "demo-address-1043",
        "1043",
        "New address",
        "Hello, I moved last month. Please send my future orders to 12 Elm Street. Thank you, Ben",
        "Needs sorting: not about a refund",
    ),
    (
        "demo-spanish-1054",
        "1054",
        "Pedido 1054 con retraso",
        "Hola, mi pedido 1054 llegó con varios días de retraso. ¿Me pueden devolver el "
        "costo del envío? Gracias, Mateo",
        "a ticket for order 1054, read as Spanish",
    ),
    (
        "demo-three-tomas",
        "1092",
        "Three late orders",
        "Hello, my last three orders were all late: 1092, 1093 and 1094. Could I have the "
        "shipping back on each of them? Thank you, Tomás",
        "one ticket for orders 1092, 1093 and 1094, waiting for a manager (the total is $29.99)",
    ),
    (
        "demo-vase-1095",
        "1095",
        "Broken vase",
        "Hello, the vase in order 1095 arrived smashed into pieces. Could I have my money back "
        "for it? Lucía",
        "a review of order 1095 for a manager, offering the vase ($24.00)",
    ),
    (
        "demo-charger-1096",
        "1096",
        "Charger missing, order 1096",
        "Hi, order 1096 came yesterday: the box arrived but the charger was missing. Please "
        "refund it. Noah",
        "a review of order 1096 for a manager, offering the charger ($43.19 with its tax)",
    ),
    (
        "demo-empty-1097",
        "1097",
        "Empty parcel",
        "Hello, my parcel for order 1097 came today but the box was empty. I would like a "
        "refund. Zoe",
        "a review of order 1097 for a manager, offering the whole order ($121.99)",
    ),
]


class Command(BaseCommand):
    help = "Hand a few demo customers' emails to the intake (idempotent; the demo only)."

    def handle(self, *args, **options):
        if not (settings.DEMO and settings.DEBUG):
            # The same guard as demo_data: demo customers' mail never enters a real desk.
            raise CommandError(
                "demo_messages runs only in the demo (REFUNDS_DEMO=true, as bin/run sets); "
                "this is production, so no demo messages are made."
            )
        if not Order.objects.filter(number="1044").exists():
            raise CommandError("The demo orders are missing: run manage.py demo_data first.")
        name, email, numbers = SEVERAL
        today = timezone.localdate()
        for weeks_ago, own in enumerate(numbers, start=1):
            order, _ = Order.objects.get_or_create(
                number=own,
                defaults={
                    "customer_name": name,
                    "customer_email": email,
                    "promised_on": today - timedelta(days=7 * weeks_ago),
                    "delivered_on": today - timedelta(days=7 * weeks_ago - 3),
                    "shipping_fee_cents": 850,
                },
            )
            demo_lines(order, weeks_ago)
        three_name, three_email, three = THREE
        promised = date(2026, 11, 2)
        for basket, (own, late, fee) in enumerate(three, start=5):
            order, _ = Order.objects.get_or_create(
                number=own,
                defaults={
                    "customer_name": three_name,
                    "customer_email": three_email,
                    "promised_on": promised,
                    "delivered_on": promised + timedelta(days=late),
                    "shipping_fee_cents": fee,
                },
            )
            demo_lines(order, basket)
        for box_name, box_email, own, late, fee, items in BOXES:
            order, _ = Order.objects.get_or_create(
                number=own,
                defaults={
                    "customer_name": box_name,
                    "customer_email": box_email,
                    "promised_on": promised,
                    "delivered_on": promised + timedelta(days=late),
                    "shipping_fee_cents": fee,
                },
            )
            demo_lines(order, items=items)
        added = 0
        now = timezone.now()
        for key, number, subject, body, _found in MESSAGES:
            sender_name, sender = _customer(number) if number else (name, email)
            _message, created = message_receive(
                channel="email",
                key=f"<{key}@demo.example.com>",
                sender=sender,
                sender_name=sender_name,
                subject=subject,
                body=body,
                received_at=now,
                raw=f"From: {sender_name} <{sender}>\nSubject: {subject}\n\n{body}\n",
                # bin/run loads the demo before it starts the broker: the sweep hands them on.
                wake=False,
            )
            added += created
        self.stdout.write(
            f"Demo messages: {added} new of {len(MESSAGES)}; the intake reads them once the "
            "workers are up (the recovery sweep hands them on)."
        )
