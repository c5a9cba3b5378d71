"""manage.py demo_messages: the demo shows the intake at work, and never runs in production."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from intake import workflow
from intake.models import Message
from intake.services import messages_recover
from refunds import enqueue, runner
from refunds.models import OrderLine, Ticket
from tests.test_security import PRODUCTION, manage


@pytest.fixture(autouse=True)
def sent(monkeypatch) -> list[tuple[str, int]]:
    """Tasks asked of the broker (none is running here: the test runs the intake itself)."""
    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(enqueue, "send", lambda name, pk: asked.append((name, pk)) or True)
    return asked


@pytest.fixture
def demo(settings, transactional_db):
    settings.DEMO = settings.DEBUG = True
    for name in ("Support agents", "Managers", "Admins"):  # a transactional test flushes them
        Group.objects.get_or_create(name=name)
    call_command("demo_data", verbosity=0)


def test_demo_messages_refuses_to_run_in_production(tmp_path):
    assert manage(tmp_path, "migrate", "--noinput", "-v0", **PRODUCTION).returncode == 0
    refused = manage(tmp_path, "demo_messages", **PRODUCTION)
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        "CommandError: demo_messages runs only in the demo (REFUNDS_DEMO=true, as bin/run "
        "sets); this is production, so no demo messages are made."
    ]


def test_demo_messages_needs_the_demo_orders_first(settings, transactional_db):
    settings.DEMO = settings.DEBUG = True
    with pytest.raises(CommandError, match="run manage.py demo_data first"):
        call_command("demo_messages")
    assert not Message.objects.exists()


def test_the_demo_messages_go_where_the_readme_says_and_a_second_run_adds_nothing(
    demo, sent, settings
):
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    call_command("demo_messages", verbosity=0)
    assert Message.objects.count() == 9 and not sent  # no broker yet: bin/run starts it later
    assert all(m.channel == "email" for m in Message.objects.all())
    assert messages_recover(), "the sweep hands them to a worker"
    for message in Message.objects.all():
        assert workflow.message_take(message.pk) == "finished"
    placed = {m.key.split("<demo-")[1].split("@")[0]: m for m in Message.objects.all()}
    assert {k: m.status for k, m in placed.items()} == {
        "late-1044": "opened",
        "damaged-1046": "opened",
        "no-order-iris": "needs_sorting",
        "address-1043": "needs_sorting",
        "spanish-1054": "opened",
        "three-tomas": "opened",
        "vase-1095": "opened",
        "charger-1096": "opened",
        "empty-1097": "opened",
    }
    assert "several orders" in placed["no-order-iris"].sorting_reason
    assert "Not about a refund" in placed["address-1043"].sorting_reason
    assert placed["spanish-1054"].reading["language"] == "es"
    tickets = {t.order.number: t for t in Ticket.objects.select_related("order")}
    assert set(tickets) == {"1044", "1046", "1054", "1092", "1095", "1096", "1097"}
    assert tickets["1092"].order_numbers() == ["1092", "1093", "1094"]  # one ticket, all three
    assert tickets["1046"].reason == "damaged" and tickets["1044"].reason == "late_delivery"
    # The orders the README's intro has a new user open by hand are left free.
    assert not Ticket.objects.filter(order__number="1042").exists()

    asked = len(sent)
    call_command("demo_messages", verbosity=0)
    assert Message.objects.count() == 9 and len(sent) == asked  # nothing new to take
    assert Ticket.objects.count() == 7
    assert OrderLine.objects.filter(order__number__in=["1095", "1096", "1097"]).count() == 8


def test_what_came_in_the_box_ends_in_a_review_offering_the_lines_it_calls_for(demo, settings):
    """The smashed vase, the missing charger and the empty box: each read for what it is (the
    rules reader), and each a manager's review whose proposal ticks the vase's line, the
    charger's line, and the whole order."""
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    call_command("demo_messages", verbosity=0)
    for message in Message.objects.all():
        workflow.message_take(message.pk)
    proposed = {}
    for number in ("1095", "1096", "1097"):
        ticket = Ticket.objects.get(order__number=number)
        assert runner.advance(ticket.pk) == "awaiting_review"
        ticket.refresh_from_db()
        assert ticket.required_role == "manager"
        (review,) = ticket.pending_payload["orders"]
        titles = {line["id"]: line["title"] for line in review["order"]["lines"]}
        proposed[number] = (
            ticket.reason,
            [(titles.get(p.get("line")) or "shipping", p.get("quantity")) for p in review["parts"]],
            ticket.amount_cents,
        )
    assert proposed == {
        "1095": ("damaged", [("Ceramic vase, white", 1)], 2400),
        "1096": ("not_received", [("USB-C charger 65 W (for the laptop)", 1)], 4319),
        "1097": (
            "not_received",
            [("Cotton T-shirt, navy, M", 3), ("Straight jeans, 32/32", 1), ("shipping", None)],
            12199,
        ),
    }


def test_bin_run_hands_the_demo_messages_in_after_the_demo_data():
    from pathlib import Path

    run = (Path(__file__).resolve().parent.parent / "bin" / "run").read_text()
    assert run.index("manage.py demo_data") < run.index("manage.py demo_messages")
    assert run.index("manage.py demo_messages") < run.index("manage.py rundesk")
