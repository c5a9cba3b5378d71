"""runner.advance in-process: leases, exact resumes, the mirror. (Real processes: test_crash.py.)"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.utils import timezone
from langgraph.checkpoint.base import create_checkpoint
from psycopg.rows import dict_row

from devtools import faults
from refunds import lease as leases
from refunds import mirror, permissions, persistence, runner, services, signals
from refunds.models import Charge, Decision, Ticket


@pytest.fixture
def crash_points(settings, tmp_path):
    """Crash points in this process (workers get them from REFUNDS_CRASH_PLAN at start)."""
    faults.install()
    plan = tmp_path / "plan.json"
    settings.REFUNDS_CRASH_PLAN = str(plan)
    settings.REFUNDS_NODE_WRAPPER = "devtools.faults.wrap_node"
    yield plan
    persistence._compiled.cache_clear()  # graphs compiled with the crash points


@pytest.fixture
def paused(transactional_db, agent, late_order) -> Ticket:
    ticket = services.ticket_open(order_number="1042")
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    return ticket


def checkpoints(ticket: Ticket) -> int:
    return len(persistence.history(ticket.thread_id))


def test_advancing_a_paused_thread_again_runs_nothing(paused):
    before = checkpoints(paused)
    assert runner.advance(paused.pk) == "awaiting_review"
    assert checkpoints(paused) == before
    paused.refresh_from_db()
    assert paused.attempts == 0 and paused.lease_owner == ""


def test_a_thread_leased_by_another_worker_is_left_alone(paused, agent):
    services.ticket_decide(
        ticket=paused,
        interrupt_id=paused.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(paused, answer="approve"),
    )
    Ticket.objects.filter(pk=paused.pk).update(
        lease_owner="someone-else", lease_expires_at=timezone.now() + timedelta(seconds=30)
    )
    assert runner.advance(paused.pk) == "busy"
    assert Charge.objects.count() == 0
    assert Decision.objects.get().applied_at is None


def test_an_expired_lease_is_taken_over(paused, agent):
    services.ticket_decide(
        ticket=paused,
        interrupt_id=paused.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(paused, answer="approve"),
    )
    Ticket.objects.filter(pk=paused.pk).update(
        lease_owner="dead-worker", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert runner.advance(paused.pk) == "refunded"
    assert Charge.objects.count() == 1


def test_a_decision_for_an_interrupt_the_thread_no_longer_waits_on_is_refused(paused, agent):
    stale = Decision.objects.create(
        ticket=paused, interrupt_id="not-pending-anymore", reviewer=agent, answer="approve"
    )
    assert runner.advance(paused.pk) == "awaiting_review"
    stale.refresh_from_db()
    assert stale.applied_at is None
    assert "no longer waits" in stale.refused_reason
    assert Charge.objects.count() == 0


def test_a_resume_is_keyed_by_interrupt_id_and_applied_once(paused, agent):
    decision = services.ticket_decide(
        ticket=paused,
        interrupt_id=paused.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(paused, answer="approve"),
    )
    assert runner.advance(paused.pk) == "refunded"
    after = checkpoints(paused)
    assert runner.advance(paused.pk) == "refunded"  # a second delivery is a no-op
    assert checkpoints(paused) == after
    decision.refresh_from_db()
    assert decision.applied_at is not None
    state = persistence.snapshot(paused.thread_id).values
    assert state["decision"]["decision_id"] == decision.pk


def test_a_resume_finds_its_decision_in_the_grant_and_reads_none_of_its_own(paused, manager):
    """The lease grant returns the decisions waiting, with the reviewer's name and answer per
    order, so the resume costs no statement to find them."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    services.ticket_decide(
        ticket=paused,
        interrupt_id=paused.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(paused, answer="approve", amount_cents=500),
    )
    with CaptureQueriesContext(connection) as statements:
        assert runner.advance(paused.pk) == "refunded"
    reads = [q["sql"] for q in statements if "username" in q["sql"] and "decision" in q["sql"]]
    assert len(reads) == 1 and reads[0].startswith("UPDATE refunds_ticket SET lease_owner")
    state = persistence.snapshot(paused.thread_id).values
    assert (state["decision"]["reviewer"], state["amount_cents"]) == ("manager", 500)


def test_a_crash_after_the_resume_landed_is_noticed_not_replayed(paused, agent):
    decision = services.ticket_decide(
        ticket=paused,
        interrupt_id=paused.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(paused, answer="approve"),
    )
    assert runner.advance(paused.pk) == "refunded"
    Decision.objects.filter(pk=decision.pk).update(applied_at=None)  # the note was lost
    Ticket.objects.filter(pk=paused.pk).update(status="running")  # and so was the mirror
    assert runner.advance(paused.pk) == "refunded"
    decision.refresh_from_db()
    assert decision.applied_at is not None and decision.refused_reason == ""
    assert Charge.objects.count() == 1


def test_the_mirror_is_rebuilt_from_the_checkpoint(paused):
    Ticket.objects.filter(pk=paused.pk).update(
        status="running", pending_interrupt_id="", pending_payload=None
    )
    mirror.rebuild(paused)
    paused.refresh_from_db()
    assert paused.status == "awaiting_review"
    assert paused.pending_interrupt_id == persistence.snapshot(paused.thread_id).interrupts[0].id
    assert paused.pending_payload["required_role"] == "agent"


def test_a_ticket_that_keeps_failing_is_marked_failed_after_the_cap(
    transactional_db, agent, late_order, settings, monkeypatch
):
    settings.REFUNDS_MAX_ATTEMPTS = 2
    ticket = services.ticket_open(order_number="1042")

    def broken(number):
        raise ConnectionError("orders service unreachable")

    monkeypatch.setattr(runner, "collaborators", _with(find_order=broken))
    assert runner.advance(ticket.pk) == "error"
    assert runner.advance(ticket.pk) == "error"
    ticket.refresh_from_db()
    assert ticket.status == "running" and "orders service unreachable" in ticket.last_error
    assert runner.advance(ticket.pk) == "failed"
    ticket.refresh_from_db()
    assert ticket.status == "failed"
    assert "gave up after 2 attempts" in ticket.last_error
    assert runner.advance(ticket.pk) == "failed"  # a failed ticket waits for an admin


def _with(**overrides):
    original = runner.collaborators

    def build(lease):
        ctx = original(lease)
        for name, value in overrides.items():
            setattr(ctx, name, value)
        return ctx

    return build


def test_an_unknown_ticket_is_reported_missing(transactional_db):
    assert runner.advance(987654) == "missing"


RENEWED_LEASE = 4.5  # seconds: the keeper renews every 1.5 s and may run 1.5 s late


def test_the_lease_is_renewed_while_a_long_run_goes_on(
    transactional_db, agent, late_order, settings, monkeypatch
):
    """A run held in check_order outlives its first lease on the database clock: only renewals
    keep it, so a second advance finds the thread busy, and the held run ends normally.

    No wall-clock race: the run is held until the test has seen what it needs (through the
    node seam the crash points use), and the lease is long enough that the keeper, which
    renews at a third of it and gives it up only past two thirds, may be late by 1.5 s (a
    machine at load 10 on 2 cores delays a thread by far less) or wait that long on a busy
    database (its statement bound is a sixth)."""
    import functools
    import threading

    from django.db import connection
    from django.db.models.functions import Now

    from tests.conftest import wait_for

    settings.REFUNDS_LEASE_SECONDS = RENEWED_LEASE
    entered, let_go = threading.Event(), threading.Event()

    def hold_check_order(name, fn):
        if name != "check_order":
            return fn

        @functools.wraps(fn)
        def held(state, *args, **kwargs):
            if not entered.is_set():  # the first run only: a takeover would pass straight on
                entered.set()
                let_go.wait(60)
            return fn(state, *args, **kwargs)

        return held

    monkeypatch.setattr(persistence, "node_wrapper", lambda: hold_check_order)
    ticket = services.ticket_open(order_number="1042")
    results = []

    def run():
        results.append(runner.advance(ticket.pk))
        connection.close()

    first = threading.Thread(target=run)
    first.start()
    try:
        assert entered.wait(30), "the run never reached check_order"
        granted = Ticket.objects.get(pk=ticket.pk)

        def database_now():
            return (
                Ticket.objects.annotate(now=Now()).values_list("now", flat=True).get(pk=ticket.pk)
            )

        wait_for(
            lambda: database_now() > granted.lease_expires_at,
            timeout=RENEWED_LEASE * 4,
            what="the first lease to run out on the database clock",
        )
        assert runner.advance(ticket.pk) == "busy"
        held = Ticket.objects.get(pk=ticket.pk)
        assert (held.lease_epoch, held.lease_owner) == (granted.lease_epoch, granted.lease_owner)
        assert held.lease_expires_at > granted.lease_expires_at  # renewed, not taken over
    finally:
        let_go.set()
        first.join(30)
    assert results == ["awaiting_review"]


def test_the_mirror_stops_offering_the_review_while_its_answer_is_applied(
    paused, agent, crash_points
):
    import json
    import threading

    from django.db import connection

    from tests.conftest import wait_for

    crash_points.write_text(
        json.dumps({"*": {"point": "charge_order", "action": "sleep", "seconds": 1.5}})
    )
    services.ticket_decide(
        ticket=paused,
        interrupt_id=paused.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(paused, answer="approve"),
    )

    def run():
        runner.advance(paused.pk)
        connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    wait_for(lambda: faults.fired(crash_points), what="the charge to start")
    mid = Ticket.objects.get(pk=paused.pk)
    assert mid.status == "running" and mid.pending_interrupt_id == ""
    assert not permissions.reviewable(agent).filter(pk=paused.pk).exists()
    worker.join()
    assert Ticket.objects.get(pk=paused.pk).status == "refunded"


def test_every_run_that_can_reach_an_effect_is_durable_sync(
    transactional_db, agent, late_order, monkeypatch
):
    """A checkpoint on disk before the next step starts wherever money or mail can follow (under
    "async", 26 kills of 30 lost the record of finished steps). The first leg, which has no
    effects, runs under "exit" and stops before any node that has one."""
    compiled = persistence.graph()
    seen = []
    real_stream = compiled.stream

    def recording_stream(*args, **kwargs):
        seen.append((kwargs.get("durability"), kwargs.get("interrupt_before")))
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(compiled, "stream", recording_stream)
    ticket = services.ticket_open(order_number="1042")
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    assert seen == [
        ("exit", ["received", "charge_order", "email", "notify", "ask_customer", "close_no_reply"]),
        ("sync", None),
    ]


def test_a_declined_ticket_stops_before_the_email_then_sends_it_under_sync(
    transactional_db, agent, on_time_order, monkeypatch
):
    compiled = persistence.graph()
    seen = []
    real_stream = compiled.stream

    def recording_stream(*args, **kwargs):
        seen.append(kwargs.get("durability"))
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(compiled, "stream", recording_stream)
    ticket = services.ticket_open(order_number="1043")
    assert runner.advance(ticket.pk) == "declined"
    assert seen == ["exit", "sync"]  # lookup .. decline, then notify


def test_a_task_boundary_keeps_the_database_connection(transactional_db):
    """What a worker runs around every task: Celery's Django fixup (which closes the connection
    unless CELERY_DB_REUSE_MAX is set) and our `recycle_connections` (Django's CONN_MAX_AGE rules).
    The connection opened for one task serves the next, on SQLite as on PostgreSQL."""
    from celery.fixups.django import DjangoWorkerFixup
    from django.db import connection

    from config.celery_app import app, recycle_connections

    fixup = DjangoWorkerFixup(app)
    # A connection this process opened for an earlier test may be past CONN_MAX_AGE by now, and
    # then recycling it is right: start from a fresh one, well inside its age.
    connection.close()
    connection.ensure_connection()
    opened = connection.connection
    for _ in range(3):  # task_prerun, then task_postrun
        fixup.on_task_prerun(sender=runner_task())
        recycle_connections()
        fixup.on_task_postrun(sender=runner_task())
        recycle_connections()
    assert connection.connection is opened


def runner_task():
    from refunds.tasks import advance_ticket

    return advance_ticket


@contextmanager
def another_process_saver() -> Iterator[Any]:
    """A checkpointer on its own connection, as an older worker process holds one."""
    from django.conf import settings

    url = persistence.checkpoint_url()
    if settings.IS_POSTGRES:
        conn = psycopg.Connection.connect(
            url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        saver: Any = persistence.FencedPostgresSaver(conn)
    else:
        conn = persistence._open_sqlite(url.removeprefix("sqlite:///"), autocommit=False)
        saver = persistence.FencedSqliteSaver(conn)
    try:
        yield saver
    finally:
        conn.close()


def test_a_takeover_raises_the_fence_before_it_reads_so_the_older_epoch_cannot_write(
    paused, agent, monkeypatch
):
    """The takeover half of the fence, interleaved by hand. An older worker took the thread and
    stalled past its lease; a newer one takes it over and reads the checkpoint. Between that read
    and the newer one's first write (its resume), the older worker wakes and writes: a finished
    task's writes, a checkpoint. Both must be refused. The write-time fence alone would let them
    in (the fence still holds the epoch before the older one's), and the newer run would go on
    from a read the older writer has since changed."""
    services.ticket_decide(
        ticket=paused,
        interrupt_id=paused.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(paused, answer="approve"),
    )
    older = leases.grant(paused.pk)
    assert older is not None
    Ticket.objects.filter(pk=paused.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    thread = paused.thread_id
    outcomes: dict[str, str] = {}

    with another_process_saver() as stale:
        tip = stale.get_tuple(persistence.thread_config(thread))
        at_tip = {"configurable": {**tip.config["configurable"], "fence": older.epoch}}

        def older_wakes(sender, *, thread_id: str, event: str, **kwargs) -> None:
            if event != "resume" or thread_id != thread:
                return
            # The newer worker has read the thread; it has not written yet.
            assert Ticket.objects.get(pk=paused.pk).lease_epoch == older.epoch + 1
            for name, write in (
                ("put_writes", lambda: stale.put_writes(at_tip, [("notes", ["stale"])], "old")),
                (
                    "put",
                    lambda: stale.put(
                        at_tip,
                        create_checkpoint(tip.checkpoint, None, 99),
                        {"source": "loop", "step": 99},
                        {},
                    ),
                ),
            ):
                try:
                    write()
                    outcomes[name] = "written"
                except persistence.FenceLost:
                    outcomes[name] = "refused"

        signals.step_reached.connect(older_wakes)
        try:
            result = runner.advance(paused.pk)
        finally:
            signals.step_reached.disconnect(older_wakes)

    assert outcomes == {"put_writes": "refused", "put": "refused"}
    assert result == "refunded"
    assert all(s.metadata.get("step") != 99 for s in persistence.history(thread))
    assert "stale" not in persistence.snapshot(thread).values["notes"]
    assert Charge.objects.count() == 1
