"""`manage.py crashtest` end to end: real workers, real kills, a JSON verdict."""

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

from devtools.processes import ROOT

pytestmark = pytest.mark.slow


def test_a_short_crashtest_loses_nothing_and_charges_nothing_twice():
    env = {**os.environ}
    url = env.pop("DATABASE_URL", "")  # crashtest makes its own database either way
    backend = "postgres" if settings.IS_POSTGRES else "embedded"  # the configuration under test
    # On PostgreSQL: a database of its own beside the suite's, and the suite's broker (no worker
    # of the suite runs meanwhile), so two checkouts' runs do not share one.
    where = ["--database-url", f"{url}_crashtest", "--broker-url", settings.CELERY_BROKER_URL]
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "crashtest",
            "--tickets",
            "20",
            "--kills",
            "10",
            "--pauses",
            "3",
            "--seed",
            "20261129",
            "--backend",
            backend,
            *(where if settings.IS_POSTGRES else []),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["backend"] == backend
    assert summary["kills"] == 10 and summary["pauses"] == 3, summary
    for promise in (
        "lost",
        "failed_by_crash",
        "double_charges",
        "refunds_per_order_over_balance",
        "approved_orders_not_refunded",
        "orders_refunded_unapproved",
        "paid_but_not_refunded",
        "refunded_without_payment",
        "emails_delivered_twice_unexplained",
        "customers_never_told",
    ):
        assert summary[promise] == 0, (promise, summary)
    # A third of the tickets (--several's default) cover two or three orders of one customer;
    # each approved order is refunded once at the processor, whichever ticket it is in.
    assert summary["tickets_several"] >= 3, summary
    assert summary["kills_inside_several"] >= 2, summary  # kills inside their fan-outs too
    several = summary["orders_in_tickets_of_several"]
    assert 2 * summary["tickets_several"] <= several <= 3 * summary["tickets_several"]
    assert summary["orders"] == 20 - summary["tickets_several"] + several
    assert summary["orders_refunded"] == summary["orders_approved"] > 0
    tickets = summary["tickets"]  # 20, and the second tickets some orders got
    assert tickets == 20 + summary["second_tickets"]
    assert summary["refunded"] + summary["declined"] + summary["rejected"] == tickets
    # One per ticket (a confirmation or why not), and a second copy only where an outside SIGKILL
    # of its sender landed in the one window of mail once (README.md, "Mail once").
    assert summary["emails_delivered_twice"] == summary["emails_twice_in_the_window"]
    assert summary["emails_delivered"] == tickets + summary["emails_twice_in_the_window"]
    assert "settled" in done.stderr  # progress is shown while it runs


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tickets", "0"], "--tickets must be at least 1"),
        (["--several", "1.5"], "--several must be between 0 and 1"),
    ],
)
def test_crashtest_refuses_nonsense_counts_with_a_clear_message(args, said):
    done = subprocess.run(
        [sys.executable, "manage.py", "crashtest", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert said in done.stderr


KEY = "t-1:email"
STEPS = [  # (time, pid, process group, key, event), as devtools/faults.py logs them
    (10.0, 11, 100, KEY, "connect"),
    (10.1, 12, 300, "t-2:email", "connect"),
    (10.2, 11, 100, KEY, "handing_over"),  # its handover mark committed, the "." about to go
    (10.2001, 11, 100, KEY, "handed_over"),
    (14.0, 13, 400, KEY, "connect"),  # the takeover that sent the second copy
    (14.1, 13, 400, KEY, "handing_over"),
]
FIRST_DOT, SECOND_DOT = 10.21, 14.12  # when each final "." arrived at the sink (its log)
# The sink answered the first "." at 10.71 (half a second later); nobody recorded that answer.


@pytest.mark.parametrize(
    ("kills", "pauses", "recorded", "in_the_window"),
    [
        ([(10.5, 100)], [], None, True),  # killed after its "." went, before the server answered
        ([(10.75, 100)], [], None, True),  # after the server's 250, before the mark
        ([(10.205, 100)], [], None, True),  # after its mark, before the sink read the "."
        ([(10.15, 100)], [], None, False),  # before its handover: no copy comes from that
        ([(10.5, 300)], [], None, False),  # another worker was killed
        ([(12.0, 100)], [], 10.72, False),  # its answer was recorded before the kill
        ([], [(10.5, 15.0, 100)], None, True),  # stopped after the ".", taken over while stopped
        ([], [(10.5, 13.0, 100)], None, False),  # woke before the takeover: time to record
        ([], [(9.0, 15.0, 100)], None, False),  # stopped before its handover
        ([], [(10.5, 15.0, 300)], None, False),  # another worker was stopped
        ([], [], None, False),  # nothing happened to it: a second copy is a bug
    ],
)
def test_a_second_copy_is_put_down_to_the_window_only_if_its_sender_stopped_inside_it(
    kills, pauses, recorded, in_the_window
):
    from devtools.management.commands.crashtest import _in_the_window

    steps = STEPS + ([(recorded, 11, 100, KEY, "recorded")] if recorded else [])
    assert _in_the_window(KEY, FIRST_DOT, SECOND_DOT, sorted(steps), kills, pauses) is (
        in_the_window
    )


def test_a_refund_without_a_payment_fails_the_run():
    from devtools.management.commands.crashtest import BROKEN_PROMISES, broken_promises

    summary = dict.fromkeys(BROKEN_PROMISES, 0) | {"refunded_without_payment": 1}
    assert broken_promises(summary) == ["refunded_without_payment"]


def test_the_readme_names_exactly_the_counters_that_fail_the_run():
    import re

    from devtools.management.commands.crashtest import BROKEN_PROMISES

    readme = (ROOT / "README.md").read_text()
    sentence = re.search(r"exits non-zero when any of (.+?) is not 0", readme, re.S)
    assert sentence, "README.md no longer says when crashtest fails"
    assert re.findall(r"`(\w+)`", sentence.group(1)) == list(BROKEN_PROMISES)


class _Counted:
    """What _summary reads of the processor and the SMTP server."""

    def __init__(self, refunds: dict[str, dict], told: list[str]) -> None:
        self.refunds, self.told = refunds, told
        self.charge_calls = dict.fromkeys(refunds, 1)
        self.lookup_calls: dict[str, int] = {}
        self.delivered: list = []

    def keys(self) -> dict[str, int]:
        return {f"{thread}:email": 1 for thread in self.told}

    def delivered_twice(self) -> list[str]:
        return []


def test_refunds_are_counted_per_order_from_the_charge_key(db, monkeypatch, settings, tmp_path):
    """Two refunds of one ticket of several orders are one per order, not a double charge; a
    second refund of one order, an approved order with none and a refund of an order not
    approved each fail the run."""
    from devtools.management.commands.crashtest import Run, broken_promises
    from refunds import enqueue, services
    from refunds.models import Ticket, TicketOrder
    from tests.conftest import make_order

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)
    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    make_order("A1", fee_cents=699, name="Ana Souza")
    for number in ("B1", "B2", "B3"):
        make_order(number, fee_cents=1000, name="Bo Berg")
    one = services.ticket_open(order_number="A1").thread_id
    three = services.ticket_open(order_numbers=["B1", "B2", "B3"]).thread_id
    Ticket.objects.update(status="refunded")  # both settled; what reached the processor varies
    TicketOrder.objects.update(open=False)
    asked_again = services.ticket_open(order_number="B1").thread_id  # a ticket of one order
    Ticket.objects.filter(thread_id=asked_again).update(status="declined")  # refunded already
    run = Run({"seed": 1, "backend": "embedded", "workers": 2}, progress=None)
    run.approved = {"A1": True, "B1": True, "B2": True, "B3": False}  # B3: on time

    def summary(keys: dict[str, int]) -> dict:
        refunds = {
            key: {"amount_cents": cents, "reference": key.split(":")[0]}
            for key, cents in keys.items()
        }
        run.gateway = run.smtp = _Counted(refunds, told=[one, three, asked_again])
        return run._summary({}, True, 1.0)

    paid = {
        f"{one}:charge_card:699": 699,
        f"{three}:charge_card:B1:1000": 1000,
        f"{three}:charge_card:B2:1000": 1000,
    }
    good = summary(paid)
    assert broken_promises(good) == []
    assert (good["orders"], good["orders_approved"], good["orders_refunded"]) == (4, 3, 3)
    assert (good["tickets_several"], good["orders_in_tickets_of_several"]) == (1, 3)

    again = summary(paid | {f"{three}:charge_card:B2:400": 400})  # B2 a second time
    assert broken_promises(again) == ["double_charges", "refunds_per_order_over_balance"]
    missing = summary({k: v for k, v in paid.items() if ":B2:" not in k})
    assert broken_promises(missing) == ["approved_orders_not_refunded"]
    unapproved = summary(paid | {f"{three}:charge_card:B3:1000": 1000})
    assert broken_promises(unapproved) == ["orders_refunded_unapproved"]
