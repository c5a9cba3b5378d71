"""The erasure's promise with real workers: a worker killed between two of its tasks (or
after a task's effect, before its result was saved) is taken over, the erasure ends done, a
task that had finished is not run again, and nothing of the customer is left. Kills come from
inside (os._exit at a named point: devtools/faults.py); the suite runs on SQLite and on
PostgreSQL."""

from __future__ import annotations

import json
import os
import signal

import pytest

from devtools.faults import fired
from ops import forgetting
from ops.erasure import erasure_request
from ops.models import Erasure
from refunds import enqueue, runner, services
from tests.conftest import wait_for
from tests.quiescence import quiesce
from tests.reviewing import decide
from tests.test_erasure import EMAIL, holding, no_earlier_threads

pytestmark = pytest.mark.slow

LEASE = 2.0
STEPS = ["scope", *forgetting.STEPS, "finish"]


@pytest.fixture
def crash_plan(tmp_path):
    path = tmp_path / "crash-plan.json"

    def write(entries: dict) -> dict[str, str]:
        path.write_text(json.dumps(entries))
        return {"REFUNDS_CRASH_PLAN": str(path), "REFUNDS_LEASE_SECONDS": str(LEASE)}

    write.path = path
    return write


def refunded(agent, monkeypatch) -> None:
    """A refunded ticket of Ana's, run in this process (no worker asked)."""
    with monkeypatch.context() as patched:
        patched.setattr(enqueue, "send", lambda *args, **kwargs: True)
        ticket = services.ticket_open(order_number="1042", opened_by=None)
        assert runner.advance(ticket.pk) == "awaiting_review"
        ticket.refresh_from_db()
        decide(ticket, agent)
        assert runner.advance(ticket.pk) == "refunded"


def settle(erasure: Erasure) -> None:
    """Sweep (the one sweep: tickets, messages, erasures) until the erasure is done."""

    def done() -> bool:
        if Erasure.objects.filter(pk=erasure.pk, status="done").exists():
            return True
        services.tickets_recover()
        return False

    wait_for(done, timeout=60, every=0.5, what="the erasure to end")


@pytest.mark.parametrize("point", ["erase:memory", "erase:orders", "erase:files:done"])
def test_a_worker_killed_inside_the_erasure_is_taken_over_and_repeats_no_finished_task(
    workers, sinks, crash_plan, settings, monkeypatch, agent, late_order, point
):
    no_earlier_threads()  # they outlive Django's flush
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    refunded(agent, monkeypatch)
    assert holding()  # the customer is there to forget
    # Killed at a task's start: zero-second sleeps count how often each task ended.
    between = not point.endswith(":done")
    ends = [f"erase:{step}:done" for step in STEPS] if between else []
    counting = [{"point": end, "times": -1, "action": "sleep", "seconds": 0} for end in ends]
    env = crash_plan({"*": [{"point": point, "times": 1}, *counting]})
    doomed = workers("doomed", pool="solo", env=env)
    erasure = erasure_request(email=EMAIL, by="admin ada")
    wait_for(lambda: not doomed.alive, timeout=30, what=f"the worker to die at {point}")
    assert [f.split("@")[1] for f in fired(crash_plan.path) if f.split("@")[1] not in ends] == [
        point
    ]
    assert Erasure.objects.get(pk=erasure.pk).status == "running"  # not half done: not done
    workers("second", pool="solo", env=env)
    settle(erasure)
    quiesce(workers)
    assert holding() == set()
    erasure.refresh_from_db()
    assert set(erasure.report) == set(forgetting.STEPS) and erasure.email == ""
    ran = [f.split("@")[1] for f in fired(crash_plan.path)]
    assert all(ran.count(end) == 1 for end in ends), ran


def test_a_worker_sigkilled_from_outside_between_two_tasks_is_taken_over(
    workers, sinks, crash_plan, settings, monkeypatch, agent, late_order
):
    """The kill an operator's `kill -9` or the OOM killer gives: the worker stops at the start of
    the outbox task (SIGSTOP at the point), and this test SIGKILLs it there."""
    no_earlier_threads()
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    refunded(agent, monkeypatch)
    ends = [f"erase:{step}:done" for step in STEPS]
    counting = [{"point": end, "times": -1, "action": "sleep", "seconds": 0} for end in ends]
    env = crash_plan({"*": [{"point": "erase:outbox", "times": 1, "action": "stop"}, *counting]})
    doomed = workers("doomed", pool="solo", env=env)
    erasure = erasure_request(email=EMAIL, by="admin ada")
    stopped = wait_for(
        lambda: [f for f in fired(crash_plan.path) if "@erase:outbox@" in f],
        what="the worker to stop at the outbox task",
    )[0]
    os.kill(int(stopped.rsplit("@", 1)[1]), signal.SIGKILL)
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to be gone")
    workers("second", pool="solo", env=env)
    settle(erasure)
    quiesce(workers)
    assert holding() == set()
    ran = [f.split("@")[1] for f in fired(crash_plan.path)]
    assert all(ran.count(end) == 1 for end in ends), ran
