"""Three queues and exactly one beat, with real workers and real beats on the test broker.

Advances go to `threads`, customers' messages to `intake`, the sweeps, timers, webhooks and
resends to `housekeeping`, so a backlog of one never holds the others back; RedBeat's lock in the
broker's Redis lets one beat of many send the schedule, and a standby takes over when that one
dies."""

from __future__ import annotations

import json
import re
import shlex
import signal
import socket
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from config.celery_app import app
from devtools.faults import fired
from intake.models import Message
from intake.services import message_receive
from refunds import services
from refunds.models import Ticket
from refunds.tasks import recover_tickets
from tests.conftest import beat_process, make_order, purge_broker, wait_for

ROOT = Path(__file__).resolve().parent.parent
HOUSEKEEPING_TASKS = [entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()] + [
    "refunds.tasks.resend_email"
]


def queue_of(task: str) -> str:
    return app.amqp.router.route({}, task)["queue"].name


# --- routes ---------------------------------------------------------------------------------------
def test_advances_go_to_the_threads_queue():
    assert queue_of("refunds.tasks.advance_ticket") == "threads"


def test_customers_messages_go_to_the_intake_queue():
    assert queue_of("intake.tasks.take_message") == "intake"


@pytest.mark.parametrize("task", HOUSEKEEPING_TASKS)
def test_every_beat_task_and_resends_go_to_the_housekeeping_queue(task):
    assert queue_of(task) == "housekeeping"


def procfile_worker_queues() -> list[str]:
    """The -Q of each of the Procfile's worker processes."""
    queues = []
    for line in (ROOT / "Procfile").read_text().splitlines():
        _, _, command = line.partition(":")
        args = shlex.split(command)
        if args[:4] == ["celery", "-A", "config", "worker"]:
            queues.append(args[args.index("-Q") + 1])
    return queues


def test_the_procfile_runs_a_worker_for_every_queue_a_task_is_routed_to():
    consumed = {queue for queues in procfile_worker_queues() for queue in queues.split(",")}
    tasks = ["refunds.tasks.advance_ticket", "intake.tasks.take_message", *HOUSEKEEPING_TASKS]
    routed = {queue_of(task) for task in tasks}
    assert consumed == routed == {"threads", "intake", "housekeeping"}


@pytest.mark.slow
def test_a_sweep_runs_on_the_housekeeping_worker_while_every_thread_worker_is_busy(
    workers, tmp_path, agent
):
    """The review's finding: sweeps queued behind advances in one queue expired unrun. Here the
    only thread worker is stuck in a node with advances waiting behind it, and the sweep still
    runs at once on the housekeeping worker."""
    plan = tmp_path / "crash-plan.json"
    plan.write_text(json.dumps({"*": {"point": "check_order", "times": -1, "action": "sleep"}}))
    stuck = workers("advancer", queues="threads", env={"REFUNDS_CRASH_PLAN": str(plan)})
    housekeeper = workers("housekeeper", queues="housekeeping")
    for number in ("2001", "2002", "2003"):
        make_order(number)
        services.ticket_open(order_number=number, note="late", opened_by=agent)
    wait_for(lambda: fired(plan), timeout=60, what="the thread worker to be stuck in a node")

    recover_tickets.delay()
    wait_for(
        lambda: re.search(r"recover_tickets\[[^]]+\] succeeded", housekeeper.output()),
        timeout=20,
        what="the sweep to run on the housekeeping worker",
    )
    assert "recover_tickets[" not in stuck.output()
    stuck.kill()  # still inside its 30 s stall: no graceful shutdown to wait for


@pytest.mark.slow
def test_a_refund_reaches_review_while_the_procfiles_workers_read_a_slow_message(
    workers, tmp_path, agent
):
    """The review's finding: an email that took 274 s to read held the only free worker, and a
    ticket opened meanwhile reached review after 263 s instead of about 2. With the Procfile's
    workers (one child each), a message stuck in its read holds no refund back."""
    plan = tmp_path / "crash-plan.json"
    plan.write_text(
        json.dumps({"*": {"point": "intake:read", "times": -1, "action": "sleep", "seconds": 120}})
    )
    env = {"REFUNDS_CRASH_PLAN": str(plan)}
    started = [workers(f"w{n}", queues=q, env=env) for n, q in enumerate(procfile_worker_queues())]
    message, _ = message_receive(
        channel="email",
        key="<slow@mail.example.com>",
        sender="ana@example.com",
        subject="Late",
        body="My order 2101 came a week late.",
        received_at=timezone.now(),
        raw="My order 2101 came a week late.",
    )
    wait_for(lambda: fired(plan), timeout=60, what="a worker to be stuck reading the message")

    make_order("2102")
    ticket = services.ticket_open(order_number="2102", note="late", opened_by=agent)
    wait_for(
        lambda: Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.AWAITING_REVIEW,
        timeout=30,
        what="the refund to reach review while the message is read",
    )
    assert Message.objects.get(pk=message.pk).finished_at is None  # still being read
    for worker in started:
        worker.kill()  # one is inside its 120 s stall: no graceful shutdown to wait for


# --- exactly one beat ---------------------------------------------------------------------------
SWEEP = 0.5  # seconds between sweeps (REFUNDS_SWEEP_SECONDS' minimum)
BEAT_ENV = {"REFUNDS_SWEEP_SECONDS": str(SWEEP), "BEAT_LOCK_SECONDS": "5"}


def sweeps_queued() -> list[str]:
    """The origin (`gen<pid>@host`: the beat that sent it) of every sweep in the housekeeping
    queue, which no worker consumes in these tests."""
    with app.connection_for_write() as conn:
        raw = conn.default_channel.client.lrange("housekeeping", 0, -1)
    messages = [json.loads(item) for item in raw]
    return [
        m["headers"]["origin"]
        for m in messages
        if m["headers"]["task"] == "refunds.tasks.recover_tickets"
    ]


@pytest.fixture
def beats(broker, tmp_path):
    """Real `celery beat` processes, each with its own log folder."""
    purge_broker()
    started = []

    def start(name: str):
        beat = beat_process(tmp_path / name, BEAT_ENV).start()
        started.append(beat)
        return beat

    yield start
    for beat in started:
        beat.stop()
    purge_broker()


@pytest.mark.slow
def test_two_beats_send_each_sweep_once_and_a_standby_takes_over_when_the_first_dies(beats):
    first = beats("first")
    wait_for(lambda: "beat: Starting" in first.output(), timeout=60, what="the first beat")
    second = beats("second")
    wait_for(lambda: "beat: Starting" in second.output(), timeout=60, what="the second beat")
    wait_for(lambda: len(sweeps_queued()) >= 2, timeout=60, what="sweeps")

    # Count over the time ten more sweeps take: one beat needs ten intervals (a loaded machine
    # only slows it down); two beats sending the schedule would need half of that.
    before = len(sweeps_queued())
    started = time.monotonic()
    wait_for(lambda: len(sweeps_queued()) >= before + 10, timeout=60, every=0.05, what="sweeps")
    elapsed = time.monotonic() - started
    assert elapsed >= 9 * SWEEP * 0.9, f"10 sweeps in {elapsed:.2f}s: more than one beat sends"
    origins = set(sweeps_queued())
    assert len(origins) == 1, origins
    host = socket.gethostname()
    holder, standby = (
        (first, second) if origins == {f"gen{first.proc.pid}@{host}"} else (second, first)
    )
    assert origins == {f"gen{holder.proc.pid}@{host}"}
    assert "Acquired lock" in holder.output() and "Acquired lock" not in standby.output()
    # RedBeat read its own settings (config/celery_app.py), not the broker's transport options.
    assert "falling back" not in first.output() + second.output()

    holder.kill()  # SIGKILL: its lock is not released, it lapses (BEAT_LOCK_SECONDS)
    wait_for(
        lambda: f"gen{standby.proc.pid}@{host}" in sweeps_queued(),
        timeout=60,
        what="the standby beat to take over",
    )
    assert "Acquired lock" in standby.output()


# --- a beat that loses its lock stands by, it does not exit ------------------------------------
def beat_lock_held() -> bool:
    with app.connection_for_write() as conn:
        return bool(
            conn.default_channel.client.exists(f"{settings.CELERY_REDBEAT_KEY_PREFIX}:lock")
        )


@pytest.mark.slow
def test_a_beat_paused_past_its_lock_time_takes_the_lock_again_and_the_sweep_carries_on(beats):
    """Under load beat went 34 s without a tick (lock 30 s), and RedBeat's LockNotOwnedError
    ended it: no sweep, no timers, no webhooks until a person restarted it."""
    beat = beats("only")
    wait_for(lambda: len(sweeps_queued()) >= 2, timeout=60, what="sweeps")
    beat.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: not beat_lock_held(), timeout=30, what="the paused beat's lock to lapse")
    finally:
        beat.signal(signal.SIGCONT)
    before = len(sweeps_queued())
    wait_for(lambda: len(sweeps_queued()) >= before + 3, timeout=30, what="sweeps again")
    assert beat.alive, beat.output()[-3000:]
    assert "Lost lock" in beat.output()
    assert set(sweeps_queued()) == {f"gen{beat.proc.pid}@{socket.gethostname()}"}


@pytest.mark.slow
def test_a_beat_woken_after_a_standby_took_over_stands_by_and_sends_nothing(beats):
    first = beats("first")
    wait_for(lambda: sweeps_queued(), timeout=60, what="the first beat's sweeps")
    second = beats("second")
    wait_for(lambda: "beat: Starting" in second.output(), timeout=60, what="the second beat")
    host = socket.gethostname()
    first.signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: f"gen{second.proc.pid}@{host}" in sweeps_queued(),
            timeout=60,
            what="the standby beat to take over",
        )
    finally:
        first.signal(signal.SIGCONT)
    wait_for(lambda: "Lost lock" in first.output(), timeout=30, what="the woken beat to stand by")
    since = len(sweeps_queued())
    wait_for(lambda: len(sweeps_queued()) >= since + 6, timeout=30, what="more sweeps")
    queued = sweeps_queued()  # newest first: Celery's Redis transport pushes on the left
    assert set(queued[: len(queued) - since]) == {f"gen{second.proc.pid}@{host}"}
    assert first.alive, first.output()[-3000:]


@pytest.mark.slow
def test_a_flushdb_of_the_broker_leaves_beat_running_and_the_schedule_back_in_place(beats):
    """A FLUSHDB takes RedBeat's lock and its schedule: beat takes the lock again and puts the
    schedule back, and the sweeps carry on from the same process."""
    beat = beats("only")
    wait_for(lambda: len(sweeps_queued()) >= 2, timeout=60, what="sweeps")
    purge_broker()
    wait_for(lambda: len(sweeps_queued()) >= 3, timeout=30, what="sweeps after the FLUSHDB")
    assert beat.alive, beat.output()[-3000:]
    assert "Lost lock" in beat.output()
    assert beat_lock_held()
