"""Checkpoint writes are atomic and fenced (refunds/persistence/).

A task with any saved write counts as finished for LangGraph, so a `put_writes` cut in half by a
kill would skip the rest of that node for good (a charge without its email). Each call must land
whole or not at all: a process is killed many times in the middle of large calls, and every call
is found complete or absent."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter

import pytest
from django.conf import settings

from devtools.processes import ROOT
from refunds import persistence
from tests.conftest import database_url

ROWS = 20_000  # writes per call: a call takes long enough to be killed in the middle

WRITER = textwrap.dedent(
    """
    import os, sys
    import django
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from refunds import persistence
    autocommit = sys.argv[1] == "autocommit"
    if autocommit:  # the old way: a connection that commits row by row (the control)
        from refunds.persistence import FencedSqliteSaver, _open_sqlite
        path = persistence.checkpoint_url().removeprefix("sqlite:///")
        saver = FencedSqliteSaver(_open_sqlite(path, autocommit=True))
    else:
        saver = persistence.checkpointer()
    # Fenced, as every run writes: the check and the rows in one transaction (on PostgreSQL an
    # implicit one, ended by the pipeline's single Sync).
    saver.claim_fence(sys.argv[2], 1)
    config = {"configurable": {"thread_id": sys.argv[2], "checkpoint_ns": "",
                               "checkpoint_id": "c1", "fence": 1}}
    n = 0
    while True:
        saver.put_writes(config, [("notes", "x" * 20)] * ROWS, task_id=f"task-{n}")
        print(n, flush=True)
        n += 1
    """
).replace("ROWS", str(ROWS))


def rows_per_task(thread_id: str) -> Counter:
    if settings.IS_POSTGRES:
        with persistence.checkpointer().conn.connection() as conn:
            rows = conn.execute(
                "SELECT task_id FROM checkpoint_writes WHERE thread_id = %s", (thread_id,)
            ).fetchall()
        return Counter(r["task_id"] for r in rows)
    path = persistence.checkpoint_url().removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT task_id FROM writes WHERE thread_id = ?", (thread_id,))
        return Counter(task for (task,) in rows)


def kill_writers(mode: str, thread_id: str, *, kills: int, tmp_path) -> Counter:
    env = {**os.environ, "DATABASE_URL": database_url()}
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = random.Random(7)
    for _ in range(kills):
        proc = subprocess.Popen(
            [sys.executable, str(script), mode, thread_id],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        proc.stdout.readline()  # one call done: the next one is under way
        time.sleep(rng.uniform(0.0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return rows_per_task(thread_id)


@pytest.mark.slow
def test_a_kill_in_the_middle_of_put_writes_leaves_each_call_whole_or_absent(
    transactional_db, tmp_path
):
    persistence.setup_persistence()
    counts = kill_writers(
        "transactional", f"atomic-{uuid.uuid4().hex}", kills=12, tmp_path=tmp_path
    )
    assert counts, "no call ever completed"
    partial = {task: n for task, n in counts.items() if n != ROWS}
    assert partial == {}


@pytest.mark.slow
@pytest.mark.skipif(
    "postgres" in os.environ.get("DATABASE_URL", ""), reason="the control is SQLite's old mode"
)
def test_the_control_a_connection_in_autocommit_mode_does_leave_half_written_calls(
    transactional_db, tmp_path
):
    """What the test above would see if the saver's connection committed row by row (as it did):
    proof that the test can tell."""
    persistence.setup_persistence()
    thread = f"autocommit-{uuid.uuid4().hex}"
    # A kill can land between two calls (more often on a loaded machine): kill again, up to 24
    # times, until one lands inside a call. The transactional test above kills 12 times.
    for _ in range(6):
        counts = kill_writers("autocommit", thread, kills=4, tmp_path=tmp_path)
        if any(n != ROWS for n in counts.values()):
            break
    assert any(n != ROWS for n in counts.values()), counts


def test_a_write_with_an_old_epoch_is_refused_and_writes_nothing(transactional_db):
    saver = persistence.checkpointer()
    thread = f"fenced-{uuid.uuid4().hex}"
    assert saver.claim_fence(thread, 3)
    config = {
        "configurable": {
            "thread_id": thread,
            "checkpoint_ns": "",
            "checkpoint_id": "c1",
            "fence": 2,
        }
    }
    with pytest.raises(persistence.FenceLost):
        saver.put_writes(config, [("notes", "stale")], task_id="stale-task")
    assert rows_per_task(thread) == Counter()
    assert not saver.claim_fence(thread, 2)  # an older epoch cannot take it back

    config["configurable"]["fence"] = 3
    saver.put_writes(config, [("notes", "current")], task_id="current-task")
    assert rows_per_task(thread) == Counter({"current-task": 1})


def test_a_thread_begun_with_sqlitesavers_string_versions_finishes_with_them(transactional_db):
    """Channel versions are small integers for new threads; a thread paused before that change
    (49-character string versions) must resume and finish: LangGraph compares versions."""
    if settings.IS_POSTGRES:
        pytest.skip("PostgresSaver keeps its own versions")
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    from bench.reference import approved, fake_context, initial
    from refunds.flow.graph import build_graph

    thread = f"old-{uuid.uuid4().hex}"
    config = {"configurable": {"thread_id": thread}}
    path = persistence.checkpoint_url().removeprefix("sqlite:///")
    old_saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    old = build_graph().compile(checkpointer=old_saver)
    paused = old.invoke(
        initial(thread, "B00001"), config, context=fake_context(), durability="sync"
    )
    stored = persistence.checkpointer().get_tuple(config).checkpoint["channel_versions"]
    assert all(isinstance(v, str) for v in stored.values())

    new = persistence.graph()
    done = new.invoke(
        Command(resume={paused["__interrupt__"][0].id: approved(paused["__interrupt__"][0].value)}),
        config,
        context=fake_context(),
        durability="sync",
    )
    assert done["outcome"] == "refunded"
    latest = persistence.checkpointer().get_tuple(config).checkpoint["channel_versions"]
    assert all(isinstance(v, str) for v in latest.values())


def test_new_threads_get_small_integer_versions(transactional_db):
    if settings.IS_POSTGRES:
        pytest.skip("PostgresSaver keeps its own versions")
    from bench.reference import fake_context, initial

    thread = f"new-{uuid.uuid4().hex}"
    config = {"configurable": {"thread_id": thread}}
    persistence.graph().invoke(
        initial(thread, "B00002"), config, context=fake_context(), durability="sync"
    )
    stored = persistence.checkpointer().get_tuple(config).checkpoint["channel_versions"]
    assert stored and all(isinstance(v, int) for v in stored.values())


@pytest.mark.skipif(
    "postgres" not in os.environ.get("DATABASE_URL", ""), reason="PostgresSaver's pipeline"
)
def test_a_fenced_put_whose_last_statement_fails_leaves_none_of_its_rows(transactional_db):
    """The fence check, the blobs and the checkpoint row are one transaction: the pipeline's
    single Sync ends it. Here the last statement fails (PostgreSQL's jsonb refuses a NUL
    character, in the checkpoint's own JSON: there whether or not values are encrypted) after
    the fence and the blobs went through; nothing of the call may stay."""
    import psycopg
    from langgraph.checkpoint.base import empty_checkpoint

    saver = persistence.checkpointer()
    thread = f"atomic-put-{uuid.uuid4().hex}"
    assert saver.claim_fence(thread, 1)
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"notes": ["kept?"]}  # a list: stored in checkpoint_blobs
    checkpoint["channel_versions"] = {"notes": version}
    checkpoint["ts"] = "bad \x00 byte"
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "fence": 1}}
    with pytest.raises(psycopg.Error):
        saver.put(config, checkpoint, {"source": "input", "step": -1}, {"notes": version})
    with saver.conn.connection() as conn:
        blobs = conn.execute(
            "SELECT count(*) AS n FROM checkpoint_blobs WHERE thread_id = %s", (thread,)
        ).fetchone()["n"]
    assert blobs == 0
    assert saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}) is None
