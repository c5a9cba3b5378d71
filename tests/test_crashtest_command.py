"""`manage.py crashtest` end to end: real workers, real kills, a JSON verdict."""

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from django.conf import settings

from devtools.management.commands.crashtest import BROKEN_PROMISES
from devtools.processes import ROOT
from tests.test_security import PRODUCTION, manage

pytestmark = pytest.mark.slow


def test_a_short_crashtest_loses_nothing_and_charges_nothing_twice():
    env = {**os.environ}
    url = env.pop("DATABASE_URL", "")  # crashtest makes its own database either way
    backend = "postgres" if settings.IS_POSTGRES else "embedded"  # the configuration under test
    # On PostgreSQL: a database of its own beside the suite's, and the suite's broker (no worker
    # of the suite runs meanwhile), so two checkouts' runs do not share one.
    where = ["--database-url", f"{url}_crashtest", "--broker-url", settings.CELERY_BROKER_URL]
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
            *(where if settings.IS_POSTGRES else []),
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
    # Half the kills from inside, each fired; the outside ones and the pauses stop with the
    # work, so up to 5 and 3 (a kill on an idle worker tests nothing).
    assert summary["kills_inside"] == 5 and summary["pauses"] <= 3, summary
    assert summary["kills_outside"] <= summary["kills_outside_planned"] == 5, summary
    assert summary["kills"] == summary["kills_inside"] + summary["kills_outside"]
    assert summary["kills_inside"] <= summary["kills_on_busy_worker"] <= summary["kills"]
    for promise in BROKEN_PROMISES:
        assert summary[promise] == 0, (promise, summary)
    # A third of the tickets (--several's default) cover two or three orders of one customer;
    # each approved order is refunded once at the processor, whichever ticket it is in.
    assert summary["tickets_several"] >= 3, summary
    assert summary["kills_inside_several"] >= 2, summary  # kills inside their fan-outs too
    several = summary["orders_in_tickets_of_several"]
    assert 2 * summary["tickets_several"] <= several <= 3 * summary["tickets_several"]
    assert summary["orders"] == 20 - summary["tickets_several"] + several
    assert summary["orders_refunded"] == summary["orders_approved"] > 0
    tickets = summary["tickets"]  # 20, and the second tickets some orders got
    assert tickets == 20 + summary["second_tickets"]
    assert summary["refunded"] + summary["declined"] + summary["rejected"] == tickets
    # One per ticket (a confirmation or why not), and a second copy only where an outside SIGKILL
    # of its sender landed in the one window of mail once (docs/guarantees.md, "Mail once").
    assert summary["emails_delivered_twice"] == summary["emails_twice_in_the_window"]
    assert summary["emails_delivered"] == tickets + summary["emails_twice_in_the_window"]
    assert "settled" in done.stderr  # progress is shown while it runs
    # A third of the tickets (--messages' default) came in as customers' emails through the
    # inbound webhook's service, the intake killed inside too: each opened its ticket (counted
    # above) and was acknowledged once at the SMTP server.
    assert summary["messages"] >= 3 and summary["kills_inside_intake"] >= 1, summary
    assert summary["acknowledgments_delivered"] + summary[
        "messages_told_by_their_outcome_alone"
    ] == (summary["messages"] + summary["messages_acknowledged_twice_in_the_window"]), summary
    # Outside kills hit ready workers, each counted by what it interrupted.
    for hit in ("holding_task", "holding_lease", "in_open_call"):
        assert summary[f"kills_outside_{hit}"] <= summary["kills_outside_effective"], summary
    assert summary["kills_outside_effective"] <= summary["kills_outside"]
    assert summary["seconds_without_a_ready_worker"] >= 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tickets", "0"], "--tickets must be at least 1"),
        (["--several", "1.5"], "--several must be between 0 and 1"),
    ],
)
def test_crashtest_refuses_nonsense_counts_with_a_clear_message(args, said):
    done = subprocess.run(
        [sys.executable, "manage.py", "crashtest", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert said in done.stderr


def test_crashtest_refuses_a_production_deployment_before_touching_anything(tmp_path):
    database = "postgres://postgres@127.0.0.1:1/refunds"  # a port nothing answers on
    refused = manage(
        tmp_path,
        *["crashtest", "--backend", "postgres", "--database-url", database],
        **PRODUCTION,
        TMPDIR=str(tmp_path),
    )
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        "CommandError: crashtest kills workers and drops and recreates the database it is "
        "pointed at: it runs in the demo (REFUNDS_DEMO=true) or where fakes are allowed "
        "(REFUNDS_ALLOW_FAKES=true: the tests, a staging box), never in production."
    ]
    assert not list(tmp_path.glob("refunds-crashtest-*"))  # no data folder made either


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


def test_each_copy_after_the_first_needs_a_window_of_its_own(settings, tmp_path):
    """A third copy is put down to the window only if the second's sender was stopped in it
    too: one kill explains one copy, never every copy after it."""
    from types import SimpleNamespace as Copy

    from devtools.management.commands.crashtest import Run

    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    third = [(16.0, 14, 500, KEY, "connect"), (16.1, 14, 500, KEY, "handing_over")]
    lines = [f"{t} {pid} {group} {key} {event}" for t, pid, group, key, event in STEPS + third]
    (tmp_path / "crash-plan.json.senders").write_text("\n".join(lines))
    run = Run({"seed": 1, "backend": "embedded", "workers": 2}, progress=None)
    dots = (FIRST_DOT, SECOND_DOT, 16.12)
    run.smtp = SimpleNamespace(
        delivered=[Copy(key=KEY, at=dot + 0.5, ended_at=dot) for dot in dots],
        delivered_twice=lambda: [KEY],
    )
    run.group_pauses, run.events = [], []
    run.group_kills = [(10.5, 100)]  # the first copy's sender, in its window
    assert [d["in_the_window"] for d in run._explain_duplicates()] == [True, False]
    run.group_kills = [(10.5, 100), (14.5, 400)]  # and the second copy's sender, in its own
    assert [d["in_the_window"] for d in run._explain_duplicates()] == [True, True]


def test_a_refund_without_a_payment_fails_the_run():
    from devtools.management.commands.crashtest import BROKEN_PROMISES, broken_promises

    summary = dict.fromkeys(BROKEN_PROMISES, 0) | {"refunded_without_payment": 1}
    assert broken_promises(summary) == ["refunded_without_payment"]


def test_the_guarantees_page_names_exactly_the_counters_that_fail_the_run():
    import re

    from devtools.management.commands.crashtest import BROKEN_PROMISES

    page = (ROOT / "docs" / "guarantees.md").read_text()
    sentence = re.search(r"exits non-zero when any of (.+?) is not 0", page, re.S)
    assert sentence, "docs/guarantees.md no longer says when crashtest fails"
    assert re.findall(r"`(\w+)`", sentence.group(1)) == list(BROKEN_PROMISES)


class _Counted:
    """What _summary reads of the processor and the SMTP server."""

    def __init__(self, refunds: dict[str, dict], told: list[str]) -> None:
        self.refunds, self.told = refunds, told
        self.charge_calls = dict.fromkeys(refunds, 1)
        self.lookup_calls: dict[str, int] = {}
        self.delivered: list = []

    def keys(self) -> dict[str, int]:
        return {f"{thread}:email": 1 for thread in self.told}

    def delivered_twice(self) -> list[str]:
        return []


def test_refunds_are_counted_per_order_from_the_charge_key(db, monkeypatch, settings, tmp_path):
    """Two refunds of one ticket of several orders are one per order, not a double charge; a
    second refund of one order, an approved order with none and a refund of an order not
    approved each fail the run."""
    from devtools.management.commands.crashtest import Run, broken_promises
    from refunds import enqueue, services
    from refunds.models import Ticket, TicketOrder
    from tests.conftest import make_order

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)
    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    make_order("A1", fee_cents=699, name="Ana Souza")
    for number in ("B1", "B2", "B3"):
        make_order(number, fee_cents=1000, name="Bo Berg")
    one = services.ticket_open(order_number="A1").thread_id
    three = services.ticket_open(order_numbers=["B1", "B2", "B3"]).thread_id
    Ticket.objects.update(status="refunded")  # both settled; what reached the processor varies
    TicketOrder.objects.update(open=False)
    asked_again = services.ticket_open(order_number="B1").thread_id  # a ticket of one order
    Ticket.objects.filter(thread_id=asked_again).update(status="declined")  # refunded already
    run = Run({"seed": 1, "backend": "embedded", "workers": 2}, progress=None)
    run.approved = {"A1": True, "B1": True, "B2": True, "B3": False}  # B3: on time

    def summary(keys: dict[str, int]) -> dict:
        refunds = {
            key: {"amount_cents": cents, "reference": key.split(":")[0]}
            for key, cents in keys.items()
        }
        run.gateway = run.smtp = _Counted(refunds, told=[one, three, asked_again])
        return run._summary({}, True, 1.0)

    paid = {
        f"{one}:charge_card:699": 699,
        f"{three}:charge_card:B1:1000": 1000,
        f"{three}:charge_card:B2:1000": 1000,
    }
    good = summary(paid)
    assert broken_promises(good) == []
    assert (good["orders"], good["orders_approved"], good["orders_refunded"]) == (4, 3, 3)
    assert (good["tickets_several"], good["orders_in_tickets_of_several"]) == (1, 3)

    again = summary(paid | {f"{three}:charge_card:B2:400": 400})  # B2 a second time
    assert broken_promises(again) == ["double_charges", "refunds_per_order_over_balance"]
    missing = summary({k: v for k, v in paid.items() if ":B2:" not in k})
    assert broken_promises(missing) == ["approved_orders_not_refunded"]
    unapproved = summary(paid | {f"{three}:charge_card:B3:1000": 1000})
    assert broken_promises(unapproved) == ["orders_refunded_unapproved"]


def test_units_are_counted_per_order_line_from_the_refunds_parts(
    db, monkeypatch, settings, tmp_path
):
    """A damaged item's refund carries its parts ("<line>x<units>"): units past what a line
    bought fail the run, and so does money past an order's lines and fee, though each refund
    alone was within them."""
    from devtools.management.commands.crashtest import Run, broken_promises
    from refunds import enqueue, services
    from refunds.models import OrderLine, Ticket, TicketOrder
    from tests.conftest import make_order

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)
    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    order = make_order("V1", fee_cents=699)
    vase = OrderLine.objects.create(
        order=order, line_id="1", sku="VASE", title="Vase", unit_price_cents=2400, quantity=2
    )
    thread = services.ticket_open(order_number="V1").thread_id
    Ticket.objects.update(status="refunded")
    TicketOrder.objects.update(open=False)
    run = Run({"seed": 1, "backend": "embedded", "workers": 2}, progress=None)
    run.approved, run.items = {"V1": True}, {"V1"}

    def summary(refunds: list[tuple[str, int]]) -> dict:
        run.gateway = run.smtp = _Counted(
            {
                f"{thread}:charge_card:V1:{cents}:{suffix}": {
                    "amount_cents": cents,
                    "reference": thread,
                    "parts": parts,
                }
                for suffix, (parts, cents) in enumerate(refunds)
            },
            told=[thread],
        )
        return run._summary({}, True, 1.0)

    good = summary([(f"{vase.pk}x2", 4800)])
    assert broken_promises(good) == []
    assert (good["orders_refunded_items"], good["line_units_refunded"]) == (1, 2)
    past = summary([(f"{vase.pk}x2", 2400), (f"{vase.pk}x1", 100)])
    assert broken_promises(past) == ["double_charges", "lines_refunded_past_bought"]
    over = summary([(f"{vase.pk}x1,shipping", 3100), (f"{vase.pk}x1", 2400)])
    assert broken_promises(over) == ["double_charges", "refunds_per_order_over_balance"]


def test_an_outside_kill_waits_for_a_ready_worker_and_a_worker_down_is_started_again(
    broker, transactional_db, tmp_path, settings
):
    """A worker still starting holds nothing to lose: the kill waits until its pool is ready.
    The one killed is started again without waiting for it; one that died by itself too, and
    is counted."""
    from devtools.management.commands.crashtest import Run
    from tests.conftest import worker_process

    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    run = Run({"seed": 1}, progress=None)
    worker = worker_process("crash0", tmp_path, queues="threads").start()
    run.workers = [worker]
    try:
        assert not worker.is_ready()
        assert run._kill_a_worker() is False
        assert worker.alive and run.outside_kills == 0

        worker.wait_ready()
        assert run._kill_a_worker() is True
        assert not worker.alive and run.outside_kills == 1
        run._start_dead_workers()
        assert worker.alive and not worker.is_ready()
        assert run.died_by_themselves == 0

        worker.wait_ready()
        worker.kill()  # not by the run: as an out-of-memory kill would
        run._start_dead_workers()
        assert worker.alive and run.died_by_themselves == 1
    finally:
        worker.stop()


def test_no_worker_is_killed_or_paused_once_the_work_is_done(
    broker, transactional_db, tmp_path, settings
):
    """Kills and pauses left when every ticket has settled would land on idle workers and test
    nothing (19 of 30 outside kills once did): the run ends with the work, its kills not made."""
    import io

    from devtools.management.commands.crashtest import Run
    from tests.conftest import worker_process

    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    run = Run({"seed": 1, "pauses": 3}, progress=io.StringIO())
    worker = worker_process("crash0", tmp_path, queues="threads").start()
    run.workers = [worker]
    try:
        worker.wait_ready()
        assert run._ready_workers() == [worker]  # a kill would find it
        assert run._drive(5, deadline=time.monotonic() + 30) is True  # nothing left to do
        assert (run.outside_kills, run.pauses, run.group_kills) == (0, 0, [])
        assert worker.alive and worker.is_ready()
    finally:
        worker.stop()


def test_a_kill_counts_as_on_a_busy_worker_when_it_hit_a_running_task(
    db, monkeypatch, settings, tmp_path
):
    """Every inside kill fires in a task; an outside kill hit a busy worker only if the worker
    (its process group) had started a task and not ended it."""
    from devtools.management.commands.crashtest import Run

    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    fired = tmp_path / "crash-plan.json.fired"
    fired.mkdir()
    (fired / "t-1@charge_order@0@4242").touch()  # a pool child that died at its point
    (tmp_path / "crash-plan.json.calls").write_text(
        "1.0 11 100 task start\n"  # busy when it was killed
        "1.0 21 200 task start\n2.0 21 200 task end\n"  # idle: its task had ended
    )
    run = Run({"seed": 1, "backend": "embedded", "workers": 2}, progress=None)
    run.group_kills = [(3.0, 100), (3.0, 200), (3.0, 300)]  # 300 never ran a task
    run.outside_kills, run.outside_planned = 3, 5
    run.gateway = run.smtp = _Counted({}, told=[])
    summary = run._summary({}, True, 1.0)
    assert (summary["kills"], summary["kills_inside"], summary["kills_outside"]) == (4, 1, 3)
    assert summary["kills_outside_planned"] == 5  # the work was done before the last two
    assert summary["kills_outside_holding_task"] == 1
    assert summary["kills_on_busy_worker"] == 2


def test_the_child_run_gets_every_option_the_command_was_given():
    """The command runs its work in a child process (a fresh data folder and database): an
    option left off the child's command line runs with its default (`--items 0` once made a
    third of the tickets damaged items all the same)."""
    from django.core.management.base import BaseCommand

    from devtools.management.commands.crashtest import (
        PARENT_ONLY,
        RUN_OPTIONS,
        Command,
        child_argv,
    )

    parser = Command().create_parser("manage.py", "crashtest")
    given = ["--tickets", "7", "--kills", "3", "--pauses", "1", "--seed", "5", "--workers", "3"]
    given += ["--backend", "postgres", "--several", "0.5", "--messages", "0", "--items", "0"]
    given += ["--timeout", "90"]
    opts = vars(parser.parse_args(given))
    child = vars(parser.parse_args(child_argv(opts)[1:]))
    assert {name: child[name] for name in RUN_OPTIONS} == {name: opts[name] for name in RUN_OPTIONS}
    assert child["items"] == 0.0
    # Every option of the command is the run's or the parent's own: none can be forgotten.
    django_own = vars(BaseCommand().create_parser("manage.py", "x").parse_args([]))
    assert set(opts) - set(django_own) == {*RUN_OPTIONS, *PARENT_ONLY}


def test_a_run_with_no_share_of_damaged_items_makes_no_item_orders(db, settings, tmp_path):
    from devtools.management.commands.crashtest import Run
    from refunds.models import OrderLine

    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    opts = {"seed": 7, "tickets": 12, "several": 0.0, "messages": 0.0, "items": 0.0}
    run = Run(opts, progress=None)
    assert len(run._open_tickets()) == 12
    assert run.items == set() and not OrderLine.objects.exists()


def test_a_lease_counts_for_the_worker_whose_process_holds_it_until_it_expires(db):
    from datetime import timedelta

    from django.utils import timezone

    from devtools.management.commands.crashtest import _holds_a_lease
    from intake.models import Message
    from intake.services import message_receive

    message, _ = message_receive(
        channel=Message.Channel.EMAIL,
        key="<lease@example.com>",
        sender="ana@example.com",
        subject="Late",
        body="Order 1042 came late",
        received_at=timezone.now(),
        raw="",
        wake=False,
    )
    mine = os.getpgid(0)  # this test's own process holds it
    held = Message.objects.filter(pk=message.pk)
    held.update(
        lease_owner=f"host:{os.getpid()}:abc", lease_expires_at=timezone.now() + timedelta(60)
    )
    assert _holds_a_lease(mine)
    assert not _holds_a_lease(mine + 100_000)  # another worker
    held.update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert not _holds_a_lease(mine)  # lapsed: its worker died or let go


@pytest.mark.parametrize(
    ("rows", "held"),
    [
        ([(1.0, 11, 100, "task", "start")], {"task"}),
        ([(1.0, 11, 100, "task", "start"), (2.0, 11, 100, "task", "end")], set()),
        (
            [(1.0, 11, 100, "task", "start"), (1.5, 11, 100, "gateway", "start")],
            {"task", "gateway"},
        ),
        ([(1.0, 11, 100, "smtp", "start"), (1.1, 11, 100, "smtp", "end")], set()),
        ([(1.0, 12, 100, "task", "start")], set()),  # its pool child died at a crash point
        ([(1.0, 13, 300, "task", "start")], set()),  # another worker
    ],
)
def test_what_an_outside_kill_interrupted_is_what_its_worker_last_started_and_did_not_end(
    rows, held
):
    from devtools.faults import held as what_was_held

    assert what_was_held(rows, 100, died={12}) == held


def test_a_worker_process_logs_the_tasks_and_calls_it_holds(broker, db, settings, tmp_path):
    """What crashtest reads to count an outside kill: a task, a call at the gateway, a
    connection to the mail server, each logged when it starts and when it ends."""
    from django.core.mail import EmailMessage

    from devtools import faults
    from devtools.fake_processor import FakeProcessor
    from devtools.smtp_sink import SmtpSink
    from refunds.tasks import recover_tickets

    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    faults.install()
    settings.REFUNDS_CRASH_INNER = {"gateway": "refunds.payments.HttpGateway"}
    smtp, gateway = SmtpSink().start(), FakeProcessor().start()
    settings.REFUNDS_GATEWAY_URL = gateway.url
    try:
        recover_tickets.apply()
        faults.CrashingGateway().charge(
            idempotency_key="t-1:charge_card:699", amount_cents=699, ticket_key="t-1"
        )
        backend = faults.TracedSmtpBackend(host="127.0.0.1", port=smtp.port)
        EmailMessage("Hi", "Hello", to=["ana@example.com"], connection=backend).send()
    finally:
        smtp.stop()
        gateway.stop()
    me = (os.getpid(), os.getpgid(0))
    logged = [
        (pid, group, kind, event)
        for _, pid, group, kind, event in faults.calls(settings.REFUNDS_CRASH_PLAN)
    ]
    assert logged == [
        (*me, kind, event) for kind in ("task", "gateway", "smtp") for event in ("start", "end")
    ]


def test_the_killed_workers_take_the_intake_from_whichever_queue_it_is_routed_to(settings):
    from devtools.management.commands.crashtest import _thread_queues

    assert _thread_queues() == "threads,intake"  # the intake's own queue (issue 27)
    settings.CELERY_TASK_ROUTES = settings.CELERY_TASK_ROUTES | {
        "intake.tasks.take_message": {"queue": "threads"}
    }
    assert _thread_queues() == "threads"


def test_each_message_must_open_one_ticket_and_be_acknowledged_once(db, settings, tmp_path):
    """Counted where it lands: a message the intake never finished is lost, one not placed in
    exactly one new ticket for its orders is misplaced, and its acknowledgment must arrive at
    the SMTP server once (a second copy only in the one window of mail once)."""
    from django.core.mail import EmailMessage, get_connection
    from django.utils import timezone

    from devtools.management.commands.crashtest import Run, broken_promises
    from devtools.smtp_sink import SmtpSink
    from intake.models import Message, MessageTicket
    from intake.services import message_receive
    from refunds import services
    from refunds.models import Ticket
    from tests.conftest import make_order

    settings.REFUNDS_CRASH_PLAN = str(tmp_path / "crash-plan.json")
    run = Run({"seed": 1, "backend": "embedded", "workers": 2}, progress=None)
    names = ["fine", "lost", "sorted", "unacknowledged", "acknowledged twice"]
    # Opened a ticket that tells the customer itself: a person looks (`received`), or it was
    # declined at once and the outcome alone was due (told "look at it" too: a broken promise).
    names += ["told by its ticket", "declined, outcome alone", "declined, told twice"]
    messages, tickets = {}, {}
    for i, name in enumerate(names):
        make_order(f"A{i}00", name="Ana Souza")
        message, _ = message_receive(
            channel=Message.Channel.EMAIL,
            key=f"<{i}@example.com>",
            sender="ana@example.com",
            subject="Late",
            body=f"Order A{i}00 came late",
            received_at=timezone.now(),
            raw="",
            wake=False,
        )
        messages[name] = message
        run.messages[message.pk] = [f"A{i}00"]
        if name in ("lost", "sorted"):
            continue
        ticket = tickets[name] = services.ticket_open(order_number=f"A{i}00")
        if name.startswith("declined"):
            Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.DECLINED)
        MessageTicket.objects.create(message=message, ticket=ticket, orders=[f"A{i}00"])
        Message.objects.filter(pk=message.pk).update(status=Message.Status.OPENED, ticket=ticket)
    Message.objects.filter(pk=messages["sorted"].pk).update(status=Message.Status.NEEDS_SORTING)
    Message.objects.exclude(pk=messages["lost"].pk).update(finished_at=timezone.now())
    run.smtp = SmtpSink().start()
    run.gateway = _Counted({}, told=[])
    try:
        backend = get_connection(
            "django.core.mail.backends.smtp.EmailBackend", host="127.0.0.1", port=run.smtp.port
        )
        keys = [
            Message.objects.get(pk=messages[name].pk).ack_key
            for name in ("fine", "sorted", "acknowledged twice", "acknowledged twice")
        ]
        keys += [f"{tickets[n].thread_id}:received" for n in names if "told" in n]
        for key in keys:
            EmailMessage(
                "Re: Late",
                "Thank you",
                to=["ana@example.com"],
                connection=backend,
                headers={"X-Refund-Key": key},
            ).send()
    finally:
        run.smtp.stop()
    summary = run._summary({}, True, 1.0)
    assert {k: v for k, v in summary.items() if k.startswith(("messages", "acknowledgments"))} == {
        "messages": 8,
        "messages_lost": 1,
        "messages_placed_not_once": 1,
        "messages_never_acknowledged": 2,  # the lost one too
        "acknowledgments_delivered": 6,
        "messages_acknowledged_twice": 1,
        "messages_acknowledged_twice_in_the_window": 0,
        "messages_acknowledged_twice_unexplained": 1,
        "messages_told_by_their_outcome_alone": 2,
        "messages_acknowledged_then_declined": 1,
    }
    assert summary["emails_delivered"] == summary["emails_delivered_twice"] == 0
    assert [p for p in broken_promises(summary) if p.startswith("messages")] == [
        "messages_lost",
        "messages_placed_not_once",
        "messages_acknowledged_twice_unexplained",
        "messages_never_acknowledged",
        "messages_acknowledged_then_declined",
    ]
