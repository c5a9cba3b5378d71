"""The promise: an order is refunded once, the customer is told once, no ticket is lost, whatever
dies, stalls or pauses, and when.

Every test here kills, pauses or races real processes: celery workers started by the `workers`
fixture, killed from inside (os._exit or SIGSTOP at a named point, see devtools/faults.py)
or from outside (SIGKILL of the whole worker). Effects are counted where they land: refunds at a
payment processor over HTTP, messages at a real SMTP server (`sinks`)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest
from django.db import connection

from devtools.faults import fired
from refunds import enqueue, persistence, policy, services
from refunds.models import Charge, ChargePart, Decision, Email, OrderLine, Ticket
from refunds.tasks import advance_ticket
from tests.conftest import beat_process, make_order, wait_for
from tests.quiescence import quiesce

pytestmark = pytest.mark.slow

LEASE = 2.0  # seconds: a dead or paused worker's lease runs out quickly in these tests
FAST = {"REFUNDS_LEASE_SECONDS": str(LEASE)}


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
    settings.REFUNDS_REWAKE_SECONDS = 1

    def run() -> list[int]:
        return services.tickets_recover()

    return run


@pytest.fixture
def beat(tmp_path):
    """A real `celery beat` running the recovery sweep on the test database."""
    started = []

    def start(env: dict[str, str]) -> float:
        """Start it and return when it holds its lock and sends the schedule (monotonic time):
        a loaded machine once took 29.2 s of a 30 s bound only to start beat."""
        proc = beat_process(tmp_path, env).start()
        started.append(proc)
        wait_for(lambda: "Acquired lock" in proc.output(), timeout=120, what="beat's lock")
        return time.monotonic()

    yield start
    for proc in started:
        proc.kill()


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
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=reviewer,
        orders=services.review_answers(ticket, answer="approve"),
    )


def settle(ticket: Ticket, sweep_now, *, timeout: float = 45) -> None:
    """Sweep until the ticket is final: what beat does every few seconds."""

    def done() -> bool:
        if status(ticket) in ("refunded", "declined", "rejected", "failed"):
            return True
        sweep_now()
        return False

    wait_for(done, timeout=timeout, every=0.5, what=f"ticket {ticket.pk} to settle")


def branch_points(ticket: Ticket) -> list[str]:
    """Checkpoints with more than one child: where the thread's history forked."""
    parents = Counter(
        snap.parent_config["configurable"]["checkpoint_id"]
        for snap in persistence.history(ticket.thread_id)
        if snap.parent_config
    )
    return [checkpoint for checkpoint, children in parents.items() if children > 1]


def assert_refunded_once(ticket: Ticket, sinks, workers) -> None:
    """Counted where it lands, once everything is quiet (nothing queued, running or leased, no
    work left for a worker): one refund at the processor, one confirmation at the mail server,
    one line of checkpoint history."""
    quiesce(workers)
    assert status(ticket) == "refunded"
    assert [r["amount_cents"] for r in sinks.gateway.refunds_for(ticket.thread_id)] == [699]
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the confirmation email")
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    assert Decision.objects.get(ticket=ticket).applied_at is not None
    assert branch_points(ticket) == []


# --- kills -------------------------------------------------------------------------------------
@pytest.mark.parametrize("point", ["gateway:after", "gateway:before", "after:charge_order"])
def test_a_worker_killed_around_the_charge_is_finished_by_a_second_worker_charging_once(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order, point
):
    first = workers("first", pool="solo")
    ticket = open_and_wait_for_review("1042", agent)
    env = crash_plan({ticket.thread_id: {"point": point, "times": 1}})
    first.stop()
    doomed = workers("doomed", pool="solo", env=env)
    approve(ticket, admin_user)
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the charge")
    assert doomed.proc.returncode == 1
    charged = sinks.gateway.refunds_for(ticket.thread_id)
    assert len(charged) == (0 if point == "gateway:before" else 1)

    workers("second", pool="solo", env=env)  # a brand-new process on the same thread
    settle(ticket, sweep_now)
    assert_refunded_once(ticket, sinks, workers)
    if point == "gateway:after":
        key = f"{ticket.thread_id}:charge_card:1042:699"
        assert sinks.gateway.charge_calls[key] == 1  # the second worker looked it up instead
        assert sinks.gateway.lookup_calls[key] == 1


@pytest.mark.parametrize("point", ["gateway:after", "gateway:before"])
def test_a_worker_killed_around_a_refund_of_order_lines_refunds_each_line_once(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order, point
):
    """A damaged vase refunded as its line (two units at $24.00), not the shipping fee: killed
    before or after the processor took it, the second worker gives back each unit once, and the
    processor and the ledger both hold that line's two units."""
    vase = OrderLine.objects.create(
        order=late_order,
        line_id="L1",
        sku="VASE-CER",
        title="Ceramic vase",
        unit_price_cents=2400,
        quantity=2,
    )
    first = workers("first", pool="solo")
    ticket = services.ticket_open(
        order_number="1042",
        opened_by=agent,
        reason=policy.DAMAGED,
        note="Customer: the vase arrived smashed into pieces",
    )
    wait_for(lambda: status(ticket) == "awaiting_review", timeout=30, what="the review")
    env = crash_plan({ticket.thread_id: {"point": point, "times": 1}})
    first.stop()
    doomed = workers("doomed", pool="solo", env=env)
    approve(ticket, admin_user)
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the charge")
    assert len(sinks.gateway.refunds_for(ticket.thread_id)) == (point == "gateway:after")

    workers("second", pool="solo", env=env)
    settle(ticket, sweep_now)
    quiesce(workers)
    assert status(ticket) == "refunded"
    refunds = sinks.gateway.refunds_for(ticket.thread_id)
    assert [(r["amount_cents"], r["parts"]) for r in refunds] == [(4800, f"{vase.pk}x2")]
    assert list(ChargePart.objects.values_list("line_id", "quantity", "amount_cents")) == [
        (vase.pk, 2, 4800)
    ]
    assert list(sinks.gateway.charge_calls.values()) == [1]
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the confirmation email")
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}


@pytest.mark.parametrize("point", ["smtp:before", "email", "after:email"])
def test_a_worker_killed_around_the_email_is_finished_by_a_second_worker_mailing_once(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order, point
):
    env = crash_plan({"*": {"point": point, "times": 1}})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, admin_user)
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the email")
    workers("second", pool="solo", env=env)
    settle(ticket, sweep_now)
    assert_refunded_once(ticket, sinks, workers)


def test_sigkill_of_the_whole_worker_mid_thread_is_recovered_by_the_beat_sweep(
    workers, beat, crash_plan, agent, late_order
):
    """Bound, from beat's readiness: lease (2 s) + sweep interval (1 s) + grace (1 s) + one
    run; we allow 30 s."""
    env = crash_plan({"*": {"point": "check_order", "times": 1, "action": "sleep", "seconds": 60}})
    env |= {"REFUNDS_SWEEP_SECONDS": "1", "REFUNDS_SWEEP_GRACE_SECONDS": "1"}
    doomed = workers("doomed", env=env)
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    wait_for(lambda: fired(crash_plan.path), what="the worker to be mid-thread")
    assert Ticket.objects.get(pk=ticket.pk).lease_owner  # it holds the lease while stalled
    doomed.kill()  # SIGKILL main process and pool child: no ack, no cleanup, lease left behind

    workers("survivor", env=env)
    ready_at = beat(env)
    wait_for(lambda: status(ticket) == "awaiting_review", timeout=30, what="recovery")
    assert time.monotonic() - ready_at < 30
    ticket.refresh_from_db()
    assert ticket.nodes_run.count("check_order:1042") == 1  # the first leg ran again, afresh


@pytest.mark.parametrize("point", ["check_order", "after:check_order", "gather", "approve"])
def test_a_kill_in_the_first_leg_reruns_only_pure_nodes_and_reaches_the_same_review(
    workers, sinks, crash_plan, sweep_now, agent, late_order, point
):
    """The first leg (the checks to the review) runs under durability "exit": a kill inside it
    keeps nothing, and the next worker runs the order's checks, gather and triage again. None of
    them has an effect: nothing reaches the processor or the mail server, and the review is the
    one an undisturbed run shows."""
    env = crash_plan({"*": {"point": point, "times": 1}})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die in the first leg")
    assert persistence.history(ticket.thread_id) == []  # "exit": nothing was kept
    workers("second", pool="solo", env=env)
    wait_for(
        lambda: sweep_now() is not None and status(ticket) == "awaiting_review",
        what="the review",
    )
    ticket.refresh_from_db()
    assert ticket.nodes_run == ["check_order:1042", "gather", "triage"]
    payload = ticket.pending_payload
    assert (payload["amount_cents"], payload["required_role"]) == (699, "agent")
    assert "**Refund $6.99** shipping on order **1042**" in payload["description"]
    assert sinks.gateway.charge_calls == {} and sinks.smtp.count() == 0
    assert len(persistence.history(ticket.thread_id)) == 1  # one checkpoint for the whole leg


# --- pauses: a process that wakes up after its lease was taken over changes nothing ------------
def _paused_worker_pid(plan_path) -> int:
    marker = wait_for(lambda: fired(plan_path), what="the worker to pause itself")[0]
    return int(marker.rsplit("@", 1)[1])


@pytest.mark.parametrize(
    "point",
    [
        "charge_order",  # in the node, before the ledger: it wakes, sees its lease gone, stops
        "gateway:before",  # past every check, at the gateway's door, holding the effect lock
        "email",
        "smtp:before",  # claimed the outbox row, about to talk to the mail server
    ],
)
def test_a_worker_paused_past_its_lease_and_woken_after_a_takeover_changes_nothing(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order, point
):
    env = crash_plan({"*": {"point": point, "times": 1, "action": "stop"}})
    workers("paused", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, admin_user)
    pid = _paused_worker_pid(crash_plan.path)
    wait_for(
        lambda: Ticket.objects.leasable().filter(pk=ticket.pk).exists(),
        what="the stopped process's lease to run out",
    )
    workers("successor", env=env)
    try:
        if point in ("charge_order", "email"):
            settle(ticket, sweep_now)  # the successor finishes the thread on its own
        else:
            # The paused process holds the effect's lock: its successor waits, it does not act.
            wait_for(
                lambda: sweep_now() is not None and "another process" in _last_error(ticket),
                what="the successor to find the effect under way",
            )
    finally:
        os.kill(pid, signal.SIGCONT)
    settle(ticket, sweep_now)
    assert_refunded_once(ticket, sinks, workers)  # quiet: the woken process finished its task
    assert sum(sinks.gateway.charge_calls.values()) == 1  # not only one refund: one call


def _last_error(ticket: Ticket) -> str:
    return Ticket.objects.values_list("last_error", flat=True).get(pk=ticket.pk)


def test_a_renewal_that_fails_stops_the_run_before_its_next_effect(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order
):
    # The run stalls in charge_order (before the ledger) while every renewal hits a database
    # error: the lease counts as lost at once, and the run stops before the gateway. The plan
    # is armed once the review waits (the worker reads it at each point): a loaded machine's
    # first leg may be long enough to renew, and the error belongs to the resumed leg.
    first = workers("first", env=crash_plan({}))
    ticket = open_and_wait_for_review("1042", agent)
    crash_plan(
        {
            "*": [
                {"point": "charge_order", "times": 1, "action": "sleep", "seconds": LEASE},
                {"point": "renew", "times": 1, "action": "error"},
            ]
        }
    )
    approve(ticket, admin_user)
    wait_for(lambda: "lease lost" in _last_error(ticket), what="the run to stop")
    assert sinks.gateway.charge_calls == {}  # it stopped before the effect
    assert "renewal failed: OperationalError" in first.output()
    settle(ticket, sweep_now)
    assert_refunded_once(ticket, sinks, workers)


# --- races -------------------------------------------------------------------------------------
def test_two_deliveries_of_the_same_resume_at_once_charge_once(
    workers, sinks, crash_plan, agent, admin_user, late_order
):
    # The first delivery stalls inside charge_order holding the lease, so the second one
    # arrives while the thread is being resumed: the lease makes it leave the thread alone.
    env = crash_plan({"*": {"point": "charge_order", "times": 1, "action": "sleep", "seconds": 3}})
    workers("w1", env=env)
    workers("w2", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, admin_user)
    wait_for(lambda: fired(crash_plan.path), what="the first delivery to stall")
    from refunds.tasks import advance_ticket

    advance_ticket.delay(ticket.pk)
    advance_ticket.delay(ticket.pk)
    wait_for(lambda: status(ticket) == "refunded", timeout=30, what="the refund")
    assert_refunded_once(ticket, sinks, workers)  # quiet: both deliveries were taken and acked


def test_two_reviewers_deciding_the_same_review_at_once_apply_one_decision(
    workers, sinks, agent, admin_user, late_order, settings
):
    # The winner's decision waits its undo window before a worker applies it: a loser slowed by
    # a busy machine still meets it at the row's compare-and-set or the UNIQUE interrupt id
    # (AlreadyDecided), not a review the worker has already moved on ("no longer pending").
    settings.REFUNDS_UNDO_SECONDS = 3.0
    workers("w1")
    ticket = open_and_wait_for_review("1042", None)  # an integration opened it: both may decide
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def decide(reviewer, answer):
        barrier.wait()
        try:
            fresh = Ticket.objects.get(pk=ticket.pk)
            results[reviewer.username] = services.ticket_decide(
                ticket=fresh,
                interrupt_id=ticket.pending_interrupt_id,
                reviewer=reviewer,
                orders=services.review_answers(fresh, answer=answer, reason="both at once"),
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
    winner = Decision.objects.get(ticket=ticket)
    final = "refunded" if winner.answer == "approve" else "rejected"
    wait_for(lambda: status(ticket) == final, what=final)
    assert len(sinks.gateway.refunds_for(ticket.thread_id)) == (1 if final == "refunded" else 0)


def test_a_committed_decision_whose_enqueue_never_happened_is_applied_by_the_sweep(
    workers, sinks, agent, admin_user, late_order, monkeypatch, sweep_now
):
    workers("w1")
    ticket = open_and_wait_for_review("1042", agent)
    with monkeypatch.context() as m:
        m.setattr(enqueue, "wake", lambda ticket_id: True)  # the process died after COMMIT
        approve(ticket, admin_user)
    quiesce(workers, needing=[ticket.pk])  # the decision waits for a worker, and none comes
    assert status(ticket) == "awaiting_review"

    assert sweep_now() == [ticket.pk]
    wait_for(lambda: status(ticket) == "refunded", what="the sweep to apply the decision")
    assert_refunded_once(ticket, sinks, workers)


def test_a_poison_ticket_that_kills_its_worker_every_time_ends_failed(
    workers, crash_plan, agent, late_order, sweep_now
):
    env = crash_plan({"*": {"point": "check_order", "times": -1}}) | {"REFUNDS_MAX_ATTEMPTS": "2"}
    worker = workers("w1", env=env)
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    settle(ticket, sweep_now, timeout=60)

    ticket.refresh_from_db()
    assert ticket.status == "failed"
    assert "gave up after 2 attempts" in ticket.last_error
    assert len(fired(crash_plan.path)) == 2  # two deaths, then no third run
    assert worker.alive  # the prefork parent survived its children's deaths

    assert services.ticket_retry(ticket=ticket)  # an admin puts it back in line
    assert status(ticket) == "running"


# --- the gateway and the mail server misbehaving -----------------------------------------------
def test_a_gateway_timeout_after_the_money_moved_is_found_by_lookup_and_refunded_once(
    workers, sinks, agent, admin_user, late_order
):
    sinks.gateway.queue("timeout_after")
    workers("w1")
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, admin_user)
    wait_for(lambda: status(ticket) == "refunded", what="the refund")
    assert_refunded_once(ticket, sinks, workers)
    key = f"{ticket.thread_id}:charge_card:1042:699"
    assert sinks.gateway.charge_calls[key] == 1 and sinks.gateway.lookup_calls[key] == 1


def test_a_declined_charge_goes_to_a_manager_with_the_gateways_reason(
    workers, sinks, agent, admin_user, late_order
):
    sinks.gateway.queue("decline")
    workers("w1")
    ticket = open_and_wait_for_review("1042", agent)
    first_review = ticket.pending_interrupt_id
    approve(ticket, admin_user)
    wait_for(
        lambda: Ticket.objects.get(pk=ticket.pk).pending_interrupt_id not in ("", first_review),
        what="the second review",
    )
    ticket.refresh_from_db()
    assert ticket.required_role == "manager"
    assert "card_declined" in ticket.pending_payload["payment_error"]
    assert "No money moved" in ticket.pending_payload["description"]
    assert sinks.gateway.refunds_for(ticket.thread_id) == [] and sinks.smtp.count() == 0


def test_a_mail_server_that_refuses_then_accepts_delivers_the_email_once(
    workers, sinks, agent, admin_user, late_order
):
    sinks.smtp.refuse(1)
    workers("w1")
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, admin_user)
    wait_for(lambda: status(ticket) == "refunded", what="the refund")
    assert sinks.smtp.refusals == 1
    assert_refunded_once(ticket, sinks, workers)
    assert Email.objects.get(ticket=ticket).attempts == 2


def test_a_mail_server_that_never_accepts_leaves_a_refund_and_resend_delivers_once(
    workers, sinks, agent, admin_user, late_order
):
    sinks.smtp.refuse(-1)
    workers("w1")
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, admin_user)
    wait_for(lambda: status(ticket) == "refunded", timeout=60, what="the refund")
    email = Email.objects.get(ticket=ticket)
    assert email.status == "pending" and "451" in email.last_error  # not delivered, and why
    assert sinks.smtp.count() == 0 and len(sinks.gateway.refunds_for(ticket.thread_id)) == 1

    sinks.smtp.accept()
    services.email_resend(email_id=email.pk, by=admin_user)
    services.email_resend(email_id=email.pk, by=admin_user)  # a double click
    wait_for(lambda: sinks.smtp.count(ticket.thread_id) == 1, what="the resent email")
    quiesce(workers)  # the second click's task was taken and acked too
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    assert Email.objects.get(ticket=ticket).status == "sent"


@pytest.mark.parametrize(
    "point",
    [
        "smtp:handed_over",  # the final "." went out, the server's answer had not come back
        "smtp:after",  # the server's 250 came back, the sent mark had not committed
    ],
)
def test_the_one_window_left_a_kill_after_the_final_dot_sends_a_second_identical_copy(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order, point
):
    """docs/guarantees.md names this window of "mail once": a process killed between handing the
    final "." over and recording the server's answer. The next epoch finds the handover mark with no
    answer, records "outcome unknown" (when, by which epoch and worker) and sends the message
    again, with the same Message-ID; the ticket is refunded. If this test ever sees one copy,
    the window closed and docs/guarantees.md should say so."""
    env = crash_plan({"*": {"point": point, "times": 1}})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, admin_user)
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die after the final '.'")
    first_epoch = Ticket.objects.values_list("lease_epoch", flat=True).get(pk=ticket.pk)
    workers("second", pool="solo", env=env)
    settle(ticket, sweep_now)
    assert status(ticket) == "refunded"
    copies = [d for d in sinks.smtp.delivered if d.key == f"{ticket.thread_id}:email"]
    assert len(copies) == 2
    assert copies[0].message_id == copies[1].message_id
    assert len(sinks.gateway.refunds_for(ticket.thread_id)) == 1
    email = Email.objects.get(ticket=ticket)
    assert email.status == "sent"
    assert email.outcome_unknown_by.startswith(f"epoch:{first_epoch} on ")
    assert email.outcome_unknown_at is not None


# --- stalls past the soft time limit -----------------------------------------------------------
def test_a_run_past_the_soft_time_limit_drains_at_its_next_step_and_is_handed_on(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order, monkeypatch
):
    """The soft limit (3 s) passes while charge_order is slow (6 s): the node finishes, the run
    stops before the email with its checkpoint saved, the worker lives on, and the next run
    sends the email without charging again. Celery's own SoftTimeLimitExceeded would have been
    raised inside the node instead."""
    env = crash_plan({"*": {"point": "charge_order", "times": 1, "action": "sleep", "seconds": 6}})
    env |= {"CELERY_TASK_SOFT_TIME_LIMIT": "3", "CELERY_TASK_TIME_LIMIT": "60"}
    env |= {"REFUNDS_CHARGE_RETRY_SECONDS": "1"}  # below half the soft limit, as settings ask
    # The webhook sweep must fit under the soft limit too (config/settings.py refuses otherwise).
    env |= {"WEBHOOK_SWEEP_BUDGET_SECONDS": "1", "WEBHOOK_TIMEOUT": "1"}
    # The limits travel in the message: the sender (this process) is configured like the worker
    # (Celery caches a task's send options on first use, so that cache goes too).
    monkeypatch.setattr(advance_ticket, "soft_time_limit", 3)
    monkeypatch.setattr(advance_ticket, "time_limit", 60)
    monkeypatch.setattr(advance_ticket, "_exec_options", None)
    worker = workers("w1", env=env)
    ticket = services.ticket_open(order_number="1042", note="late", opened_by=agent)
    # A first leg slower than the soft limit on a loaded machine drains too: sweep meanwhile.
    wait_for(
        lambda: status(ticket) == "awaiting_review" or (sweep_now() and False),
        timeout=60,
        every=0.5,
        what="the review",
    )
    approve(ticket, admin_user)

    def drained() -> bool:
        return Ticket.objects.filter(
            pk=ticket.pk, last_error__startswith="drained: soft time limit (3 s) passed"
        ).exists()

    wait_for(drained, timeout=30, what="the slow run to drain")
    assert "run drained: soft time limit (3 s) passed" in worker.output()
    assert sinks.smtp.count(ticket.thread_id) == 0  # it stopped before the email node
    settle(ticket, sweep_now)
    assert_refunded_once(ticket, sinks, workers)
    ticket.refresh_from_db()
    assert ticket.nodes_run.count("charge_order:1042") == 1
    assert "SoftTimeLimitExceeded" not in worker.output()
    assert worker.alive


# --- a ticket of several orders: the charge fan-out -------------------------------------------
# Three orders of one customer, all approved: approve sends one charge_order per order, and the
# three run in parallel threads of one superstep. A plan stops one order's task and holds its
# siblings (devtools/faults.py's "<node>:<order>" and "gateway:*:<order>" points), so "after the
# first charge" means exactly one refund at the processor when the kill lands.
SEVERAL = {"1042": 699, "1044": 1250, "1047": 2000}
FIRST, SECOND, THIRD = SEVERAL


@pytest.fixture
def three_orders(db):
    return [make_order(number, fee_cents=fee) for number, fee in SEVERAL.items()]


def open_several_and_wait_for_review(who) -> Ticket:
    ticket = services.ticket_open(order_numbers=list(SEVERAL), note="late", opened_by=who)
    wait_for(lambda: status(ticket) == "awaiting_review", timeout=30, what="the review")
    ticket.refresh_from_db()
    assert [o["status"] for o in ticket.pending_payload["orders"]] == ["open"] * 3
    return ticket


def order_key(ticket: Ticket, number: str) -> str:
    return f"{ticket.thread_id}:charge_card:{number}:{SEVERAL[number]}"


def refunded_at_the_processor(sinks, ticket: Ticket) -> dict[str, list[int]]:
    """Refunds of the ticket at the processor, by the order its key names."""
    by_order: dict[str, list[int]] = {}
    for key, refund in list(sinks.gateway.refunds.items()):
        if refund["reference"] == ticket.thread_id:
            number = key.removeprefix(f"{ticket.thread_id}:charge_card:").split(":")[0]
            by_order.setdefault(number, []).append(refund["amount_cents"])
    return by_order


def hold_the_others(*numbers: str, seconds: float = 30) -> list[dict]:
    """Hold these orders' charge tasks at their start (before the ledger), once."""
    return [
        {"point": f"charge_order:{n}", "times": 1, "action": "sleep", "seconds": seconds}
        for n in numbers
    ]


def fired_at(plan_path, point: str) -> list[str]:
    return [m for m in fired(plan_path) if m.split("@")[1] == point]


def assert_each_order_refunded_once(ticket: Ticket, sinks, workers) -> None:
    """Counted where it lands, once everything is quiet: each order one refund at the processor
    (one charge call per key), the ledger one succeeded row per order, one email for the
    ticket at the mail server, one line of checkpoint history."""
    quiesce(workers)
    assert status(ticket) == "refunded"
    assert refunded_at_the_processor(sinks, ticket) == {n: [c] for n, c in SEVERAL.items()}
    assert sinks.gateway.charge_calls == {order_key(ticket, n): 1 for n in SEVERAL}
    ledger = Charge.objects.filter(ticket=ticket).values_list("order__number", "status")
    assert sorted(ledger) == [(n, "succeeded") for n in sorted(SEVERAL)]
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the confirmation email")
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    assert Decision.objects.get(ticket=ticket).applied_at is not None
    assert branch_points(ticket) == []


def test_sigkill_after_the_first_of_three_charges_landed_charges_each_order_once(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, three_orders
):
    """The first order's money reached the processor and its answer was not recorded (the
    process stopped there, its siblings held before the ledger); then a SIGKILL of the whole
    worker. A second worker looks the first order's key up and charges the other two."""
    first = workers("first", pool="solo")
    ticket = open_several_and_wait_for_review(agent)
    stop = {"point": f"gateway:after:{FIRST}", "times": 1, "action": "stop"}
    env = crash_plan({ticket.thread_id: [stop, *hold_the_others(SECOND, THIRD)]})
    first.stop()
    doomed = workers("doomed", pool="solo", env=env)
    approve(ticket, admin_user)
    wait_for(
        lambda: fired_at(crash_plan.path, f"gateway:after:{FIRST}"),
        what="the first charge to land",
    )
    assert refunded_at_the_processor(sinks, ticket) == {FIRST: [SEVERAL[FIRST]]}
    doomed.kill()  # SIGKILL of the stopped worker: no answer recorded, no cleanup

    workers("second", pool="solo", env=env)
    settle(ticket, sweep_now)
    assert_each_order_refunded_once(ticket, sinks, workers)
    assert sinks.gateway.lookup_calls[order_key(ticket, FIRST)] == 1  # found, not charged again


def recorded_charges(ticket: Ticket) -> set[str]:
    """Orders whose charge task's writes are on disk (the checkpoint's pending writes: a task of
    the running superstep that finished while its siblings still run)."""
    saved = persistence.checkpointer().get_tuple(
        {"configurable": {"thread_id": ticket.thread_id, "checkpoint_ns": ""}}
    )
    if saved is None:
        return set()
    return {
        number
        for _task, channel, value in saved.pending_writes or []
        if channel == "charges"
        for number in value
    }


def test_a_worker_killed_between_the_charges_of_three_orders_charges_each_once(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, three_orders
):
    """The first order's charge task finished and its writes are on disk, the other two have not
    charged (held at their start): a SIGKILL of the whole worker there. The next worker keeps
    the first order's recorded charge (no second call, no lookup) and runs what is left."""
    first = workers("first", pool="solo")
    ticket = open_several_and_wait_for_review(agent)
    env = crash_plan({ticket.thread_id: hold_the_others(SECOND, THIRD)})
    first.stop()
    doomed = workers("doomed", pool="solo", env=env)
    approve(ticket, admin_user)
    wait_for(lambda: recorded_charges(ticket) == {FIRST}, what="the first charge to be recorded")
    assert refunded_at_the_processor(sinks, ticket) == {FIRST: [SEVERAL[FIRST]]}
    doomed.kill()  # between the charges: the siblings are still held before their ledger rows

    workers("second", pool="solo", env=env)
    settle(ticket, sweep_now)
    assert_each_order_refunded_once(ticket, sinks, workers)
    assert sinks.gateway.lookup_calls.get(order_key(ticket, FIRST), 0) == 0  # kept, not redone


@pytest.mark.parametrize("point", ["smtp:before", "email", "after:email"])
def test_a_worker_killed_around_the_email_of_three_orders_mails_once_and_charges_nothing_again(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, three_orders, point
):
    first = workers("first", pool="solo")
    ticket = open_several_and_wait_for_review(agent)
    env = crash_plan({ticket.thread_id: {"point": point, "times": 1}})
    first.stop()
    doomed = workers("doomed", pool="solo", env=env)
    approve(ticket, admin_user)
    wait_for(lambda: not doomed.alive, timeout=60, what="the worker to die around the email")
    assert doomed.proc.returncode == 1
    # Every charge was made before the email: the kill comes after all three.
    assert refunded_at_the_processor(sinks, ticket) == {n: [c] for n, c in SEVERAL.items()}
    workers("second", pool="solo", env=env)
    settle(ticket, sweep_now)
    assert_each_order_refunded_once(ticket, sinks, workers)


@pytest.mark.parametrize(
    "point",
    [
        f"charge_order:{FIRST}",  # in the first order's task, before its ledger row
        f"gateway:after:{FIRST}",  # its money moved, the answer not recorded, its lock held
    ],
)
def test_a_worker_paused_in_the_charge_fan_out_past_its_lease_changes_nothing_when_woken(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, three_orders, point
):
    """SIGSTOP inside the fan-out (the siblings held at their start, so they wake after the
    takeover too), for longer than the lease: a second worker takes the thread over and charges
    what is left; the woken process neither charges nor mails again."""
    first = workers("first")
    ticket = open_several_and_wait_for_review(agent)
    stop = {"point": point, "times": 1, "action": "stop"}
    env = crash_plan({ticket.thread_id: [stop, *hold_the_others(SECOND, THIRD, seconds=5)]})
    first.stop()
    workers("paused", env=env)
    approve(ticket, admin_user)
    marker = wait_for(lambda: fired_at(crash_plan.path, point), what="the worker to pause")[0]
    pid = int(marker.rsplit("@", 1)[1])
    wait_for(
        lambda: Ticket.objects.leasable().filter(pk=ticket.pk).exists(),
        what="the stopped process's lease to run out",
    )
    workers("successor", env=env)
    try:
        if point.startswith("charge_order"):
            settle(ticket, sweep_now)  # the successor finishes the thread on its own
        else:
            # The paused process holds the first order's effect lock: its successor charges the
            # other two and waits for that one.
            wait_for(
                lambda: sweep_now() is not None and "another process" in _last_error(ticket),
                what="the successor to find the first charge under way",
            )
            wait_for(
                lambda: set(refunded_at_the_processor(sinks, ticket)) == set(SEVERAL),
                what="the successor to charge the other two",
            )
            assert sinks.smtp.count(ticket.thread_id) == 0  # no email while one is not settled
    finally:
        os.kill(pid, signal.SIGCONT)
    settle(ticket, sweep_now)
    assert_each_order_refunded_once(ticket, sinks, workers)  # quiet: the woken one finished
