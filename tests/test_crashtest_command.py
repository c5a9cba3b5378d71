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
    env.pop("DATABASE_URL", None)  # crashtest makes its own database either way
    backend = "postgres" if settings.IS_POSTGRES else "embedded"  # the configuration under test
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
        "paid_but_not_refunded",
        "refunded_without_payment",
        "emails_delivered_twice_unexplained",
        "customers_never_told",
    ):
        assert summary[promise] == 0, (promise, summary)
    tickets = summary["tickets"]  # 20, and the second tickets some orders got
    assert tickets == 20 + summary["second_tickets"]
    assert summary["refunded"] + summary["declined"] + summary["rejected"] == tickets
    # One per ticket (a confirmation or why not), and a second copy only where an outside SIGKILL
    # of its sender landed in the one window of mail once (README.md, "Mail once").
    assert summary["emails_delivered_twice"] == summary["emails_twice_in_the_window"]
    assert summary["emails_delivered"] == tickets + summary["emails_twice_in_the_window"]
    assert "settled" in done.stderr  # progress is shown while it runs


def test_crashtest_refuses_nonsense_counts_with_a_clear_message():
    done = subprocess.run(
        [sys.executable, "manage.py", "crashtest", "--tickets", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "--tickets must be at least 1" in done.stderr


@pytest.mark.parametrize(
    ("kills", "in_the_window"),
    [
        ([(10.51, 100)], True),  # its worker killed 10 ms after the server accepted
        ([(10.2, 100)], True),  # killed after its final "." left, before the server answered
        ([(10.51, 200)], False),  # another worker was killed: the copy is not explained
        ([(12.0, 100)], False),  # long after: the sender had time to commit its mark
        ([(9.0, 100)], False),  # before it opened the conversation
        ([], False),
    ],
)
def test_a_second_copy_is_put_down_to_the_window_only_after_its_own_senders_kill(
    kills, in_the_window
):
    from refunds.management.commands.crashtest import _in_the_window

    opened = [
        (8.0, 7, 300, "t-1:email"),
        (10.0, 11, 100, "t-1:email"),
        (10.1, 12, 300, "t-2:email"),
    ]
    assert _in_the_window("t-1:email", 10.5, opened, kills) is in_the_window
