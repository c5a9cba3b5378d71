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
