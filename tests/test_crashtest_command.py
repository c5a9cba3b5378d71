"""`manage.py crashtest` end to end: real workers, real kills, a JSON verdict."""

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

from refunds.devtools.processes import ROOT

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
        "emails_delivered_twice",
        "customers_never_told",
    ):
        assert summary[promise] == 0, (promise, summary)
    tickets = summary["tickets"]  # 20, and the second tickets some orders got
    assert tickets == 20 + summary["second_tickets"]
    assert summary["refunded"] + summary["declined"] + summary["rejected"] == tickets
    assert summary["emails_delivered"] == tickets  # one per ticket: a confirmation or why not
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
