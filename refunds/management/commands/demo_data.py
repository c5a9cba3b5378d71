from datetime import date, timedelta

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError

from refunds.models import Order

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
        for number, name, late, fee in ORDERS:
            Order.objects.update_or_create(
                number=number,
                defaults={
                    "customer_name": name,
                    "customer_email": demo_email(number, name),
                    "promised_on": promised,
                    "delivered_on": promised + timedelta(days=late),
                    "shipping_fee_cents": fee,
                },
            )
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
