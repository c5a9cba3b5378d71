from datetime import date, timedelta

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from refunds.models import Order, OrderLine
from refunds.order_in import OrderIn
from refunds.services.orders import CHANGEABLE

DEMO_PASSWORD = "refund-demo"  # demo use only, stated in README.md
USERS = [
    ("agent", "Support agents", False, False),
    # A second agent: four-eyes means whoever opened a ticket never decides it.
    ("agent2", "Support agents", False, False),
    ("manager", "Managers", False, False),
    ("admin", "Admins", True, True),
]
# number, customer, days late (negative: early), shipping fee in cents
ORDERS = [
    ("1042", "Ana Souza", 4, 699),
    ("1043", "Ben Okafor", -1, 499),
    ("1044", "Chloe Martin", 2, 1250),
    ("1045", "Dev Patel", 6, 4800),
    ("1046", "Eli Novak", 0, 899),
    ("1047", "Farah Haddad", 3, 2000),
    ("1048", "Gus Lindqvist", 9, 2001),
    ("1049", "Hana Ito", 1, 15000),
]
# A shift's worth more (1050-1089), in turn: agent-sized and late, manager-sized and late,
# flagged (a fee over $100) and late, on time (declined by policy); names and amounts vary.
_FIRST = ["Ines", "Jon", "Kemal", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa"]
_LAST = ["Alves", "Berg", "Costa", "Dubois", "Eze", "Fischer", "Garcia", "Holm"]
_KINDS = [(3, 450, 1350), (5, 2150, 6400), (2, 10500, 18000), (-2, 399, 2500)]
ORDERS += [
    (
        str(1050 + i),
        f"{_FIRST[i % len(_FIRST)]} {_LAST[i % len(_LAST)]}",
        _KINDS[i % 4][0] + i % 3 if _KINDS[i % 4][0] > 0 else _KINDS[i % 4][0] - i % 2,
        _KINDS[i % 4][1] + (i * 173) % (_KINDS[i % 4][2] - _KINDS[i % 4][1]),
    )
    for i in range(40)
]


# What the demo's orders hold: baskets of 1 to 4 lines, (sku, title, unit price in cents,
# quantity, tax in cents). The first eight orders take the first eight baskets (1046, whose
# customer writes about a broken lamp, holds a lamp); the others take them in turn.
BASKETS = [
    [("VASE-BLU-L", "Blue stoneware vase, large", 4800, 1, 0)],
    [
        ("TEE-NVY-M", "Cotton T-shirt, navy, M", 1800, 3, 0),
        ("JNS-32", "Straight jeans, 32/32", 5900, 1, 0),
    ],
    [
        ("CHG-65W", "USB-C charger 65 W", 3999, 1, 320),
        ("CBL-C-2M", "USB-C cable, 2 m", 1299, 2, 208),
    ],
    [
        ("LAP-14-16", "Laptop 14-inch, 16 GB", 89900, 1, 7192),
        ("CHG-65W", "USB-C charger 65 W (for the laptop)", 3999, 1, 320),
        ("SLV-14", "Laptop sleeve, 14-inch", 2450, 1, 196),
    ],
    [
        ("LAMP-ARC", "Arc floor lamp, brass", 12900, 1, 0),
        ("BULB-E27-4", "LED bulbs E27, 4-pack", 1299, 1, 0),
    ],
    [
        ("DRS-GRN-S", "Linen dress, green, S", 7900, 1, 0),
        ("BLT-BRN", "Leather belt, brown", 3500, 1, 0),
    ],
    [
        ("TEE-WHT-L", "Cotton T-shirt, white, L", 1800, 2, 0),
        ("SCK-WOOL-3", "Wool socks, 3 pairs", 1450, 2, 0),
        ("CAP-GRY", "Knit cap, grey", 2200, 1, 0),
        ("SCF-RED", "Wool scarf, red", 3900, 1, 0),
    ],
    [("VASE-BUD-S", "Bud vase, small", 1600, 2, 0), ("CNDL-CDR", "Soy candle, cedar", 2400, 1, 0)],
    [("LAMP-DSK", "Desk lamp, matte black", 3900, 1, 0)],
]


def demo_lines(
    order: Order, basket: int = 0, *, items: list[tuple[str, str, int, int, int]] | None = None
) -> None:
    """Give a demo order lines (BASKETS[basket], or `items` of the same shape), its total and
    what was paid (all of it), read as every order in is (refunds.order_in); an order that has
    lines keeps them (a second run adds nothing)."""
    if order.lines.exists():
        return
    items = BASKETS[basket % len(BASKETS)] if items is None else items
    total = order.shipping_fee_cents + sum(price * qty + tax for _, _, price, qty, tax in items)
    raw = {
        "total_cents": total,
        "paid_cents": total,
        "lines": [
            {"line_id": str(n), "sku": sku, "title": title, "unit_price_cents": price,
             "quantity": qty, "tax_cents": tax}
            for n, (sku, title, price, qty, tax) in enumerate(items, start=1)
        ],
    }  # fmt: skip
    held = {name: getattr(order, name) for name in ("number", *CHANGEABLE)}
    sent = OrderIn.read({**held, **raw}, minor_units=True)
    with transaction.atomic():
        OrderLine.objects.bulk_create(
            OrderLine(order=order, **line.model_dump()) for line in sent.lines or ()
        )
        Order.objects.filter(pk=order.pk).update(total_cents=total, paid_cents=total)


def demo_email(number: str, name: str) -> str:
    # The first eight keep their short addresses (README names them); the shift's customers are
    # distinct people, so no earlier refund of a namesake flags them as repeat refunders.
    who = name.split()[0] if int(number) < 1050 else name.replace(" ", ".")
    return f"{who.lower()}@example.com"


class Command(BaseCommand):
    help = "Load demo orders and the demo users agent, agent2, manager, admin (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--orders",
            type=int,
            default=0,
            help="also create this many extra late orders (for load runs)",
        )

    def handle(self, *args, orders: int = 0, **options):
        if not (settings.DEMO and settings.DEBUG):
            # Demo users with a published password must never exist where DEBUG is off.
            raise CommandError(
                "demo_data runs only in the demo (REFUNDS_DEMO=true, as bin/run sets); "
                "this is production, so no demo users are made."
            )
        promised = date(2026, 11, 2)
        for basket, (number, name, late, fee) in enumerate(ORDERS):
            order, _ = Order.objects.update_or_create(
                number=number,
                defaults={
                    "customer_name": name,
                    "customer_email": demo_email(number, name),
                    "promised_on": promised,
                    "delivered_on": promised + timedelta(days=late),
                    "shipping_fee_cents": fee,
                },
            )
            demo_lines(order, basket)
        for i in range(orders):
            Order.objects.get_or_create(
                number=f"L{i:06d}",
                defaults={
                    "customer_name": f"Load Customer {i}",
                    "customer_email": f"load{i}@example.com",
                    "promised_on": promised,
                    "delivered_on": promised + timedelta(days=1 + i % 5),
                    "shipping_fee_cents": 500 + (i * 37) % 1400,
                },
            )
        for username, group, staff, superuser in USERS:
            user, created = User.objects.get_or_create(username=username)
            if created:
                user.set_password(DEMO_PASSWORD)
            user.is_staff, user.is_superuser = staff, superuser
            if not user.email:
                user.email = f"{username}@example.com"  # managers get the overdue reminders
            user.save()
            user.groups.add(Group.objects.get(name=group))
        self.stdout.write(
            f"Demo data ready: {len(ORDERS) + orders} orders; users agent, manager, "
            f"admin (and agent2) with password {DEMO_PASSWORD!r}."
        )
