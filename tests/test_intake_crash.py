"""The intake's promise with real workers: whatever dies or pauses inside which task, a message
ends with one ticket and one acknowledgment, counted in the tickets table and at a real SMTP
server (sent by the ticket the message opened, on its way to a person). Kills come from inside
(os._exit or SIGSTOP at a named point: devtools/faults.py)."""

from __future__ import annotations

import json
import os
import signal

import pytest
from django.utils import timezone

from devtools.faults import fired
from intake.models import Message
from intake.services import message_receive
from refunds import services
from refunds.models import Email, Ticket
from tests.conftest import wait_for
from tests.quiescence import quiesce

pytestmark = pytest.mark.slow

LEASE = 2.0
BODY = "Hi, my order #1042 came almost a week late, can I get the delivery charge back? Ana"
TASKS = ("read", "find_orders", "open_ticket", "acknowledge")
POINTS = [f"intake:{task}{end}" for task in TASKS for end in ("", ":done")] + ["smtp:before"]


@pytest.fixture
def crash_plan(tmp_path):
    path = tmp_path / "crash-plan.json"

    def write(entries: dict) -> dict[str, str]:
        path.write_text(json.dumps(entries))
        return {"REFUNDS_CRASH_PLAN": str(path), "REFUNDS_LEASE_SECONDS": str(LEASE)}

    write.path = path
    return write


@pytest.fixture
def sweep_now(settings):
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    settings.REFUNDS_REWAKE_SECONDS = 1
    return services.tickets_recover  # the one sweep: tickets, and messages (intake/apps.py)


def receive(key: str = "<m1@mail.example.com>") -> tuple[Message, bool]:
    return message_receive(
        channel="email",
        key=key,
        sender="ana@example.com",
        sender_name="Ana Souza",
        subject="Late parcel",
        body=BODY,
        received_at=timezone.now(),
        raw=BODY,
    )


def finished(message: Message) -> bool:
    return Message.objects.filter(pk=message.pk, finished_at__isnull=False).exists()


def settle(message: Message, sweep_now, timeout: float = 60) -> None:
    """Sweep until the message is finished and the ticket it opened has told the customer (a
    kill inside the ticket's own email is the sweep's to repair too)."""

    def done() -> bool:
        if finished(message) and acknowledged(message):
            return True
        sweep_now()
        return False

    wait_for(done, timeout=timeout, every=0.5, what=f"message {message.pk} to be acknowledged")


def received_key(message: Message) -> str:
    ticket = Message.objects.get(pk=message.pk).ticket
    return f"{ticket.thread_id}:received" if ticket else ""


def acknowledged(message: Message) -> bool:
    key = received_key(message)
    return bool(key) and Email.objects.filter(key=key, status="sent").exists()


def assert_one_ticket_and_one_acknowledgment(message: Message, sinks, workers) -> None:
    quiesce(workers)
    wait_for(lambda: Message.objects.get(pk=message.pk).lease_owner == "", what="the release")
    message.refresh_from_db()
    assert message.status == "opened"
    assert Ticket.objects.filter(order__number="1042").count() == 1
    assert message.ticket == Ticket.objects.get()
    # The ticket it opened acknowledges it, on its way to the review (the intake leaves that to
    # the ticket, which would tell a refusal alone): one email, whoever died where.
    received = received_key(message)
    wait_for(lambda: sinks.smtp.count(received), what="the acknowledgment")
    assert sinks.smtp.keys() == {received: 1}
    assert Email.objects.get(key=received).status == "sent"


@pytest.mark.parametrize("point", POINTS)
def test_a_worker_killed_inside_an_intake_task_ends_with_one_ticket_and_one_acknowledgment(
    workers, sinks, crash_plan, sweep_now, late_order, point
):
    # Killed between tasks (at one's start): zero-second sleeps count each task's ends.
    between = point.startswith("intake:") and not point.endswith(":done")
    ends = [f"intake:{task}:done" for task in TASKS] if between else []
    counting = [{"point": end, "times": -1, "action": "sleep", "seconds": 0} for end in ends]
    env = crash_plan({"*": [{"point": point, "times": 1}, *counting]})
    doomed = workers("doomed", pool="solo", env=env)
    message, created = receive()
    assert created
    wait_for(lambda: not doomed.alive, timeout=30, what=f"the worker to die at {point}")
    assert [f.split("@")[1] for f in fired(crash_plan.path) if f.split("@")[1] not in ends] == [
        point
    ]
    again, created = receive()  # the provider delivers it again meanwhile
    assert again.pk == message.pk and not created
    workers("second", pool="solo", env=env)
    settle(message, sweep_now)
    assert_one_ticket_and_one_acknowledgment(message, sinks, workers)
    # A task finished before the kill is not run again on replay: each ended once.
    ran = [f.split("@")[1] for f in fired(crash_plan.path)]
    assert all(ran.count(end) == 1 for end in ends), ran


@pytest.mark.parametrize("point", ["intake:open_ticket", "intake:acknowledge"])
def test_a_worker_paused_past_its_lease_and_woken_after_a_takeover_changes_nothing(
    workers, sinks, crash_plan, sweep_now, late_order, point
):
    env = crash_plan({"*": {"point": point, "times": 1, "action": "stop"}})
    workers("paused", pool="solo", env=env)
    message, _ = receive()
    marker = wait_for(lambda: fired(crash_plan.path), what="the worker to stop")[0]
    pid = int(marker.rsplit("@", 1)[1])
    wait_for(
        lambda: Message.objects.needing_worker().filter(pk=message.pk).exists(),
        what="the stopped worker's lease to run out",
    )
    try:
        workers("successor", pool="solo", env=env)
        settle(message, sweep_now)
        receive()  # a second delivery while the first worker sleeps: nothing new
    finally:
        os.kill(pid, signal.SIGCONT)
    # The woken worker finishes its task (acked: quiet) having changed nothing.
    assert_one_ticket_and_one_acknowledgment(message, sinks, workers)


def test_a_run_past_the_soft_time_limit_drains_before_its_next_task_and_is_handed_on(
    workers, sinks, crash_plan, sweep_now, late_order, monkeypatch
):
    """The soft limit (3 s) passes while find_orders is slow (6 s): the task finishes, the run
    stops before open_ticket with the results before it saved, the lease is released, the worker
    lives on, and the next run opens the ticket and acknowledges without reading or finding the
    orders again. Celery's own SoftTimeLimitExceeded would have been raised inside the task."""
    from intake.tasks import take_message

    env = crash_plan(
        {
            "*": [
                {"point": "intake:find_orders", "times": 1, "action": "sleep", "seconds": 6},
                # Zero-second sleeps: markers that count how often each task ran.
                {"point": "intake:read", "times": -1, "action": "sleep", "seconds": 0},
                {"point": "intake:find_orders:done", "times": -1, "action": "sleep", "seconds": 0},
            ]
        }
    )
    env |= {"CELERY_TASK_SOFT_TIME_LIMIT": "3", "CELERY_TASK_TIME_LIMIT": "60"}
    env |= {"REFUNDS_CHARGE_RETRY_SECONDS": "1"}  # below half the soft limit, as settings ask
    env |= {"WEBHOOK_SWEEP_BUDGET_SECONDS": "1", "WEBHOOK_TIMEOUT": "1"}
    # The limits travel in the message: the sender (this process) is configured like the worker.
    monkeypatch.setattr(take_message, "soft_time_limit", 3)
    monkeypatch.setattr(take_message, "time_limit", 60)
    monkeypatch.setattr(take_message, "_exec_options", None)
    worker = workers("w1", env=env)
    message, _ = receive()

    def drained() -> bool:
        return Message.objects.filter(
            pk=message.pk,
            last_error__startswith="drained: soft time limit (3 s) passed",
            lease_owner="",
            finished_at__isnull=True,
        ).exists()

    wait_for(drained, timeout=30, what="the slow run to drain and release its lease")
    assert "run drained: soft time limit (3 s) passed" in worker.output()
    assert not Ticket.objects.exists()  # it stopped before open_ticket
    settle(message, sweep_now)
    assert_one_ticket_and_one_acknowledgment(message, sinks, workers)
    ran = [f.split("@")[1] for f in fired(crash_plan.path)]
    assert ran.count("intake:read") == 1 and ran.count("intake:find_orders:done") == 1
    assert "SoftTimeLimitExceeded" not in worker.output()
    assert worker.alive


THREE = "My last three orders were all late: 1042, 1044 and 1047. Refund the delivery? Ana"


def test_a_worker_killed_after_opening_a_ticket_of_three_orders_opens_no_second(
    workers, sinks, crash_plan, sweep_now, late_order
):
    """The ticket covering the message's three orders committed, the worker died before its
    result was saved: the next worker's open_ticket finds the message placed and opens nothing;
    the acknowledgment names the three orders once."""
    from tests.conftest import make_order

    make_order("1044")
    make_order("1047")
    env = crash_plan({"*": {"point": "intake:open_ticket:done", "times": 1}})
    doomed = workers("doomed", pool="solo", env=env)
    message, _ = message_receive(
        channel="email",
        key="<three@mail.example.com>",
        sender="ana@example.com",
        sender_name="Ana Souza",
        subject="Three late parcels",
        body=THREE,
        received_at=timezone.now(),
        raw=THREE,
    )
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die after the ticket")
    assert Ticket.objects.count() == 1  # its effect committed before the kill
    workers("second", pool="solo", env=env)
    settle(message, sweep_now)
    quiesce(workers)
    message.refresh_from_db()
    ticket = Ticket.objects.get()
    assert message.status == "opened" and message.ticket == ticket
    assert ticket.order_numbers() == ["1042", "1044", "1047"]
    received = received_key(message)
    wait_for(lambda: sinks.smtp.count(received), what="the acknowledgment")
    assert sinks.smtp.keys() == {received: 1}
    assert "your orders 1042, 1044 and 1047" in Email.objects.get(key=received).body
