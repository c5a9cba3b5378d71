"""The promise: a card is never charged twice and no ticket is lost, whatever dies and when.

Every test here kills or races real processes: celery workers started by the `workers` fixture,
killed from inside (`os._exit` at a named point, see refunds/faults.py) or from outside (SIGKILL of
the whole worker)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from refunds import services
from refunds.models import Charge, Decision, Email, Ticket
from tests.conftest import beat_process, wait_for

pytestmark = pytest.mark.slow

LEASE = "2"  # seconds: a dead worker's lease runs out quickly in these tests
FAST = {"REFUNDS_LEASE_SECONDS": LEASE}


@pytest.fixture
def crash_plan(tmp_path):
    path = tmp_path / "crash-plan.json"

    def write(entries: dict) -> dict[str, str]:
        path.write_text(json.dumps(entries))
        return {"REFUNDS_CRASH_PLAN": str(path), **FAST}

    write.path = path
    return write


@pytest.fixture
def sweep_now(settings):
    """Run the recovery sweep from the test, as beat would, with no grace period."""
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0

    def run() -> list[int]:
        return services.tickets_recover()

    return run


def status(ticket: Ticket) -> str:
    return Ticket.objects.values_list("status", flat=True).get(pk=ticket.pk)


def open_and_wait_for_review(order_number: str, who) -> Ticket:
    ticket = services.ticket_open(order_number=order_number, note="late", opened_by=who)
    wait_for(lambda: status(ticket) == "awaiting_review", timeout=30, what="the review")
    ticket.refresh_from_db()
    return ticket


def approve(ticket: Ticket, reviewer) -> Decision:
    ticket.refresh_from_db()
    return services.ticket_decide(
        ticket=ticket, interrupt_id=ticket.pending_interrupt_id, answer="approve", reviewer=reviewer
    )


def assert_refunded_once(ticket: Ticket) -> None:
    assert status(ticket) == "refunded"
    assert Charge.objects.filter(ticket=ticket).count() == 1
    assert Email.objects.filter(ticket=ticket).count() == 1
    assert Email.objects.get(ticket=ticket).sent_at is not None
    assert Decision.objects.get(ticket=ticket).applied_at is not None


def settle(ticket: Ticket, sweep_now, *, timeout: float = 45) -> None:
    """Sweep until the ticket is final: what beat does every few seconds."""

    def done() -> bool:
        if status(ticket) in ("refunded", "declined", "rejected", "failed"):
            return True
        sweep_now()
        return False

    wait_for(done, timeout=timeout, every=0.5, what=f"ticket {ticket.pk} to settle")


@pytest.mark.parametrize("point", ["charge_card:after_gateway", "charge_card:before_gateway"])
def test_a_worker_killed_inside_charge_card_is_finished_by_a_second_worker_charging_once(
    workers, crash_plan, sweep_now, agent, late_order, point
):
    first = workers("first", pool="solo")
    ticket = open_and_wait_for_review("1042", agent)
    env = crash_plan({ticket.thread_id: {"point": point, "times": 1}})
    first.stop()
    first = workers("doomed", pool="solo", env=env)
    approve(ticket, agent)
    wait_for(lambda: not first.alive, timeout=30, what="the worker to die inside charge_card")
    assert first.proc.returncode == 1
    if point == "charge_card:after_gateway":
        assert Charge.objects.filter(ticket=ticket).count() == 1  # the gateway took the money
    else:
        assert Charge.objects.filter(ticket=ticket).count() == 0

    workers("second", pool="solo", env=env)  # a brand-new process on the same thread
    settle(ticket, sweep_now)
    assert_refunded_once(ticket)


def test_sigkill_of_the_whole_worker_mid_thread_is_recovered_by_the_beat_sweep(
    workers, beat, crash_plan, agent, late_order
):
    """Bound: lease (2 s) + sweep interval (1 s) + grace (1 s) + one run; we allow 30 s."""
    env = crash_plan({"*": {"point": "check_policy", "times": 1, "action": "sleep", "seconds": 60}})
    env |= {"REFUNDS_SWEEP_SECONDS": "1", "REFUNDS_SWEEP_GRACE_SECONDS": "1"}
    doomed = workers("doomed", env=env)
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    wait_for(lambda: any(crash_plan_fired(crash_plan.path)), what="the worker to be mid-thread")
    assert Ticket.objects.get(pk=ticket.pk).lease_owner  # it holds the lease while stalled
    doomed.kill()  # SIGKILL main process and pool child: no ack, no cleanup, lease left behind

    killed_at = time.monotonic()
    workers("survivor", env=env)
    beat(env)
    wait_for(lambda: status(ticket) == "awaiting_review", timeout=30, what="recovery")
    recovered_in = time.monotonic() - killed_at
    assert recovered_in < 30
    ticket.refresh_from_db()
    assert ticket.nodes_run.count("lookup") == 1  # durability sync: finished steps are not redone


def crash_plan_fired(path: Path) -> list[str]:
    from refunds.faults import fired

    return fired(path)


@pytest.fixture
def beat(tmp_path):
    """A real `celery beat` running the recovery sweep on the test database."""
    started = []

    def start(env: dict[str, str]):
        started.append(beat_process(tmp_path, env).start())

    yield start
    for proc in started:
        proc.kill()


def test_two_deliveries_of_the_same_resume_at_once_charge_once(
    workers, crash_plan, agent, late_order
):
    # The first delivery stalls inside charge_card holding the lease, so the second one
    # arrives while the thread is being resumed: the lease makes it leave the thread alone.
    env = crash_plan(
        {"*": {"point": "charge_card:before_gateway", "times": 1, "action": "sleep", "seconds": 3}}
    )
    workers("w1", env=env)
    workers("w2", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, agent)
    wait_for(lambda: crash_plan_fired(crash_plan.path), what="the first delivery to stall")
    from refunds.tasks import advance_ticket

    advance_ticket.delay(ticket.pk)
    advance_ticket.delay(ticket.pk)
    wait_for(lambda: status(ticket) == "refunded", timeout=30, what="the refund")
    time.sleep(1)  # let any straggling delivery finish
    assert_refunded_once(ticket)


def test_two_reviewers_deciding_the_same_review_at_once_apply_one_decision(
    workers, agent, admin_user, late_order
):
    workers("w1")
    ticket = open_and_wait_for_review("1042", agent)
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def decide(reviewer, answer):
        barrier.wait()
        try:
            results[reviewer.username] = services.ticket_decide(
                ticket=Ticket.objects.get(pk=ticket.pk),
                interrupt_id=ticket.pending_interrupt_id,
                answer=answer,
                reason="both at once",
                reviewer=reviewer,
            )
        except services.AlreadyDecided as exc:
            results[reviewer.username] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=(agent, "approve")),
        threading.Thread(target=decide, args=(admin_user, "reject")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    losers = [r for r in results.values() if isinstance(r, services.AlreadyDecided)]
    assert len(losers) == 1, results
    assert "Already decided" in str(losers[0])
    assert Decision.objects.filter(ticket=ticket).count() == 1
    winner = Decision.objects.get(ticket=ticket)
    final = "refunded" if winner.answer == "approve" else "rejected"
    wait_for(lambda: status(ticket) == final, what=final)
    assert Charge.objects.filter(ticket=ticket).count() == (1 if final == "refunded" else 0)


def test_a_committed_decision_whose_enqueue_never_happened_is_applied_by_the_sweep(
    workers, agent, late_order, monkeypatch, sweep_now
):
    workers("w1")
    ticket = open_and_wait_for_review("1042", agent)
    with monkeypatch.context() as m:
        m.setattr(services, "wake", lambda ticket_id: None)  # the process died after COMMIT
        approve(ticket, agent)
    time.sleep(1)
    assert status(ticket) == "awaiting_review"  # nothing woke a worker

    assert sweep_now() == [ticket.pk]
    wait_for(lambda: status(ticket) == "refunded", what="the sweep to apply the decision")
    assert_refunded_once(ticket)


def test_a_poison_ticket_that_kills_its_worker_every_time_ends_failed(
    workers, crash_plan, agent, late_order, sweep_now
):
    env = crash_plan({"*": {"point": "lookup", "times": -1}}) | {"REFUNDS_MAX_ATTEMPTS": "2"}
    worker = workers("w1", env=env)
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    settle(ticket, sweep_now, timeout=60)

    ticket.refresh_from_db()
    assert ticket.status == "failed"
    assert "gave up after 2 attempts" in ticket.last_error
    assert len(crash_plan_fired(crash_plan.path)) == 2  # two deaths, then no third run
    assert worker.alive  # the prefork parent survived its children's deaths

    assert services.ticket_retry(ticket=ticket)  # an admin puts it back in line
    assert status(ticket) == "running"
