"""`manage.py crashtest` end to end: real workers, real kills, a JSON verdict."""

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

from refunds.processes import ROOT

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
    assert summary["tickets"] == 20 and summary["backend"] == backend
    assert summary["kills"] == 10, summary
    assert summary["lost"] == 0
    assert summary["double_charges"] == 0
    assert summary["double_emails"] == 0
    assert summary["missing_charges"] == 0 and summary["charges_without_refund"] == 0
    assert summary["refunded"] + summary["declined"] + summary["rejected"] == 20
    assert summary["emails_sent"] == 20  # one per ticket: a refund confirmation or why not
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
