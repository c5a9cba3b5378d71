"""The demo's orders hold realistic lines (1 to 4 items: a vase, a lamp, a charger with its
laptop, clothes) whose total adds up and is paid in full; a second run adds nothing."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.core.management import call_command

from devtools.management.commands.demo_data import ORDERS
from refunds.models import Order, OrderLine
from refunds.order_in import TOTAL_TOLERANCE_PER_LINE


def demo(settings) -> None:
    settings.DEMO = settings.DEBUG = True
    for name in ("Support agents", "Managers", "Admins"):
        Group.objects.get_or_create(name=name)
    call_command("demo_data", verbosity=0)


def test_every_demo_order_holds_one_to_four_lines_that_add_up_to_what_was_paid(db, settings):
    demo(settings)

    orders = Order.objects.filter(number__in=[n for n, *_ in ORDERS]).prefetch_related("lines")
    assert orders.count() == len(ORDERS)
    for order in orders:
        lines = list(order.lines.all())
        assert 1 <= len(lines) <= 4, order.number
        came_to = order.shipping_fee_cents + sum(line.amount_cents for line in lines)
        assert abs(order.total_cents - came_to) <= TOTAL_TOLERANCE_PER_LINE * len(lines)
        assert order.paid_cents == order.total_cents


def test_the_demo_holds_a_vase_a_lamp_a_charger_with_its_laptop_and_clothes(db, settings):
    demo(settings)

    titles = " | ".join(OrderLine.objects.values_list("title", flat=True))
    for thing in ("vase", "lamp", "Laptop", "charger", "T-shirt", "jeans"):
        assert thing in titles
    lamp = Order.objects.get(number="1046")  # its customer writes about a broken lamp
    assert "lamp" in " ".join(lamp.lines.values_list("title", flat=True))


def test_a_second_demo_run_adds_no_line(db, settings):
    demo(settings)
    before = list(OrderLine.objects.order_by("id").values_list())

    call_command("demo_data", verbosity=0)

    assert list(OrderLine.objects.order_by("id").values_list()) == before
