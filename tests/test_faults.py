"""devtools/faults.py itself: the crash points the crash tests and crashtest plan."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.db import OperationalError

from devtools import faults
from devtools.processes import ROOT
from tests.conftest import wait_for


@pytest.fixture
def plan(tmp_path, settings):
    path = tmp_path / "crash-plan.json"
    settings.REFUNDS_CRASH_PLAN = str(path)

    def write(entries: dict) -> Path:
        path.write_text(json.dumps(entries))
        return path

    return write


def test_a_fan_out_task_fires_its_orders_own_point_and_not_its_siblings(plan):
    plan({"t-1": {"point": "charge_order:1044", "times": -1, "action": "error"}})
    charge = faults.wrap_node("charge_order", lambda task: "charged")
    assert charge({"ticket_key": "t-1", "number": "1042", "amount_cents": 699}) == "charged"
    with pytest.raises(OperationalError, match="charge_order:1044"):
        charge({"ticket_key": "t-1", "number": "1044", "amount_cents": 1250})
    plan({"t-1": {"point": "check_order:1047", "times": -1, "action": "error"}})
    check = faults.wrap_node("check_order", lambda task: "checked")
    assert check({"ticket_key": "t-1", "order_number": "1042", "reason": "late"}) == "checked"
    with pytest.raises(OperationalError, match="check_order:1047"):
        check({"ticket_key": "t-1", "order_number": "1047", "reason": "late"})


class Paid:
    """A gateway that always pays."""

    def charge(self, **kwargs) -> str:
        return "re_1"


def test_the_gateway_points_name_the_order_a_key_of_several_charges(plan, settings):
    assert faults.charged_order("t-1", "t-1:charge_card:1044:1250") == "1044"
    assert faults.charged_order("t-1", "t-1:charge_card:699") == ""  # one order: no order point
    # A refund of parts: the key names their digest, and a refund again after a failed one.
    assert faults.charged_order("t-1", "t-1:charge_card:1044:7450:3f9a1c2b") == "1044"
    assert faults.charged_order("t-1", "t-1:charge_card:1044:7450:3f9a1c2b:again1") == "1044"
    settings.REFUNDS_CRASH_INNER = {"gateway": f"{__name__}.Paid"}
    gateway = faults.CrashingGateway()
    plan({"t-1": {"point": "gateway:after:1044", "times": -1, "action": "error"}})
    assert gateway.charge(
        idempotency_key="t-1:charge_card:1042:699", amount_cents=699, ticket_key="t-1"
    )
    with pytest.raises(OperationalError, match="gateway:after:1044"):
        gateway.charge(
            idempotency_key="t-1:charge_card:1044:1250", amount_cents=1250, ticket_key="t-1"
        )


def test_times_1_fires_once_among_parallel_tasks_of_one_process(plan):
    path = plan({"*": {"point": "charge_order", "times": 1, "action": "sleep", "seconds": 0}})
    start = threading.Barrier(8)

    def task() -> None:
        start.wait()
        faults.crash_point("t-1", "charge_order")

    threads = [threading.Thread(target=task) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(faults.fired(path)) == 1


STOPS = 20
STOPPING = f"""
import sys, threading
from django.conf import settings
settings.configure(REFUNDS_CRASH_PLAN=sys.argv[1])
from devtools import faults

def task(n):
    faults.crash_point("t-1", "charge_order:1042")
    with open(sys.argv[2], "a") as out:  # what a charge task does next: its ledger row
        out.write(f"{{n}}\\n")

for n in range({STOPS}):
    one = threading.Thread(target=task, args=(n,))
    one.start()
    one.join()  # the main thread waits, as the graph's runner waits on its tasks
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_stop_at_a_point_stops_the_process_before_the_task_goes_on(plan, tmp_path):
    """A SIGSTOP sent to the process lets the thread at the point run on for a moment (another
    thread takes the signal, and this one went on into its ledger row): the stop must hold the
    task at its point. Twenty stops, as the race is lost only now and then."""
    path = plan({"t-1": {"point": "charge_order:1042", "times": -1, "action": "stop"}})
    after = tmp_path / "after"
    after.touch()
    proc = subprocess.Popen(
        [sys.executable, "-c", STOPPING, str(path), str(after)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )

    def written() -> int:
        return len(after.read_text().splitlines())

    try:
        for n in range(STOPS):
            wait_for(lambda: _state(proc.pid) == "T", timeout=30, what=f"stop {n}")
            assert written() == n  # stopped at its point: nothing more ran in it
            proc.send_signal(signal.SIGCONT)
            wait_for(lambda n=n: written() == n + 1, timeout=30, what=f"task {n} to go on")
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_a_crash_plan_points_the_apps_seams_at_the_crash_points(tmp_path):
    shown = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django.conf import settings as s; print(s.REFUNDS_GATEWAY, "
            "s.REFUNDS_CRASH_INNER['gateway'], s.REFUNDS_NODE_WRAPPER, s.WORKFLOW_TASK_WRAPPER)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "REFUNDS_DEMO": "true",
            "REFUNDS_DATA_DIR": str(tmp_path),
            "REFUNDS_CRASH_PLAN": str(tmp_path / "crash-plan.json"),
            "REFUNDS_GATEWAY": "refunds.payments.http.HttpGateway",
        },
    )

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1].split() == [
        "devtools.faults.CrashingGateway",
        "refunds.payments.http.HttpGateway",
        "devtools.faults.wrap_node",
        "devtools.faults.wrap_task",
    ]
