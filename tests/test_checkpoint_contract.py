"""What refunds/persistence/ (its savers) relies on in the LangGraph checkpoint packages.

Our savers write the checkpoint tables themselves (the fence check shares each write's
transaction) and leave reads to upstream. That holds only while our writes store exactly the rows
upstream's own `put` and `put_writes` would, in the schema upstream reads. The packages are pinned
exactly; an upgrade must fail here, naming what moved, not in production.

After an upgrade that fails here: read the new upstream code named in the failure against
refunds/persistence/sqlite.py or postgres.py, bring our copy in line, then update the fingerprint
below."""

from __future__ import annotations

import hashlib
import inspect
import re
import sqlite3
import uuid
from importlib.metadata import version
from typing import Any

from django.conf import settings
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres import base as pg_base
from langgraph.checkpoint.sqlite import SqliteSaver

from devtools.processes import ROOT
from refunds import persistence
from refunds.persistence import postgres, sqlite

PINNED = {
    "langgraph": "1.2.24",
    "langgraph-checkpoint": "4.3.2",
    "langgraph-checkpoint-sqlite": "3.1.2",
    "langgraph-checkpoint-postgres": "3.2.0",
}

# sha256 (first 16 hex digits) of the upstream code our write path copies or must agree with.
FINGERPRINT = {
    "SqliteSaver.setup": "3cf9b47c0ae69bbb",  # the schema our rows go into
    "SqliteSaver.put": "34490037f2f4f41f",
    "SqliteSaver.put_writes": "db6857cb1413183c",
    "PostgresSaver.put": "69dfc912a0c55913",
    "PostgresSaver.put_writes": "342959d47d82b127",
    "BasePostgresSaver._dump_blobs": "e9ede4bdab3f81d5",
    "BasePostgresSaver._dump_writes": "9c4a17640f85dbba",
    "postgres MIGRATIONS": "b61d83ce19b67141",  # the schema our rows go into
}


def upstream_code() -> dict[str, str]:
    return {
        "SqliteSaver.setup": inspect.getsource(SqliteSaver.setup),
        "SqliteSaver.put": inspect.getsource(SqliteSaver.put),
        "SqliteSaver.put_writes": inspect.getsource(SqliteSaver.put_writes),
        "PostgresSaver.put": inspect.getsource(PostgresSaver.put),
        "PostgresSaver.put_writes": inspect.getsource(PostgresSaver.put_writes),
        "BasePostgresSaver._dump_blobs": inspect.getsource(pg_base.BasePostgresSaver._dump_blobs),
        "BasePostgresSaver._dump_writes": inspect.getsource(pg_base.BasePostgresSaver._dump_writes),
        "postgres MIGRATIONS": "\n".join(pg_base.MIGRATIONS),
    }


def test_the_installed_langgraph_packages_are_the_pinned_ones():
    assert {name: version(name) for name in PINNED} == PINNED


def test_upstreams_write_code_and_schema_are_the_ones_our_copy_was_made_from():
    found = {
        name: hashlib.sha256(code.encode()).hexdigest()[:16]
        for name, code in upstream_code().items()
    }
    changed = sorted(name for name in FINGERPRINT if found[name] != FINGERPRINT[name])
    assert changed == [], (
        f"upstream changed {changed}: compare it with the copy in refunds/persistence/sqlite.py "
        f"or postgres.py (put, put_writes, the SQL constants), then update FINGERPRINT to {found}"
    )


def test_our_sqlite_statements_are_sqlitesavers_own():
    put = inspect.getsource(SqliteSaver.put)
    put_writes = inspect.getsource(SqliteSaver.put_writes)
    assert f'"{sqlite.SQLITE_PUT_CHECKPOINT_SQL}"' in put
    assert f'"{sqlite.SQLITE_UPSERT_WRITES_SQL}"' in put_writes
    assert f'"{sqlite.SQLITE_INSERT_WRITES_SQL}"' in put_writes


def test_our_postgres_statements_are_postgressavers_own():
    base = pg_base.BasePostgresSaver
    assert postgres.PG_UPSERT_CHECKPOINT_BLOBS_SQL == base.UPSERT_CHECKPOINT_BLOBS_SQL
    assert postgres.PG_UPSERT_CHECKPOINTS_SQL == base.UPSERT_CHECKPOINTS_SQL
    assert postgres.PG_UPSERT_CHECKPOINT_WRITES_SQL == base.UPSERT_CHECKPOINT_WRITES_SQL
    assert postgres.PG_INSERT_CHECKPOINT_WRITES_SQL == base.INSERT_CHECKPOINT_WRITES_SQL


def test_the_write_path_hooks_into_no_internal_of_upstream():
    """Overriding SqliteSaver.cursor() (documented as internal) or PostgresSaver._cursor(), or
    importing `_internal`, is what made an ordinary upgrade able to split the fence from the
    write."""
    assert "cursor" not in vars(sqlite.FencedSqliteSaver)
    assert "_cursor" not in vars(postgres.FencedPostgresSaver)
    offenders = [
        str(path.relative_to(ROOT))
        for folder in (
            "core",
            "config",
            "refunds",
            "api",
            "ops",
            "reviews",
            "insights",
            "webhooks",
            "devtools",
            "bench",
        )
        for path in (ROOT / folder).rglob("*.py")
        if re.search(r"langgraph\.checkpoint\.\w+(\.| import )_internal", path.read_text())
    ]
    assert offenders == []


def test_the_refund_graph_has_no_delta_channel():
    """Our PostgreSQL put stores channel values as PostgresSaver does for every channel but a
    DeltaChannel, whose snapshots upstream marks inline; the refund graph must not use one."""
    from langgraph.channels import DeltaChannel

    from refunds.flow.graph import build_graph

    channels = build_graph().compile().channels
    assert [name for name, ch in channels.items() if isinstance(ch, DeltaChannel)] == []


# --- the rows themselves: ours against upstream's, on this run's database -----------------------
def upstream_saver() -> Any:
    if settings.IS_POSTGRES:
        return PostgresSaver(persistence.checkpointer().conn)
    path = persistence.checkpoint_url().removeprefix("sqlite:///")
    return SqliteSaver(sqlite3.connect(path, check_same_thread=False))


def stored_rows(thread_id: str) -> dict[str, list]:
    """Every row of the thread, minus the thread id, in a stable order."""
    if settings.IS_POSTGRES:
        queries = {
            "checkpoints": "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, "
            "checkpoint, metadata FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_id",
            "blobs": "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs "
            "WHERE thread_id = %s ORDER BY channel, version",
            "writes": "SELECT checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
            "type, blob FROM checkpoint_writes WHERE thread_id = %s ORDER BY task_id, idx",
        }
        with persistence.checkpoint_connection(persistence.checkpointer().conn) as conn:
            return {
                table: [dict(r) for r in conn.execute(sql, (thread_id,)).fetchall()]
                for table, sql in queries.items()
            }
    queries = {
        "checkpoints": "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
        "checkpoint, metadata FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id",
        "writes": "SELECT checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, "
        "value FROM writes WHERE thread_id = ? ORDER BY task_id, idx",
    }
    path = persistence.checkpoint_url().removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        return {table: conn.execute(sql, (thread_id,)).fetchall() for table, sql in queries.items()}


def write_a_little_of_everything(saver: Any, thread_id: str, fence: int | None) -> None:
    """Two checkpoints (the second a child of the first), inline and stored channel values,
    ordinary writes and a special channel's (which replaces its row)."""
    fenced = {"fence": fence} if fence is not None else {}
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **fenced}}
    first = empty_checkpoint()
    first["id"] = "1f0a0000-0000-6000-8000-000000000001"
    first["ts"] = "2026-11-06T10:00:00+00:00"
    first["channel_values"] = {"note": "late", "amount_cents": 699, "notes": ["opened"]}
    first["channel_versions"] = {"note": "1", "amount_cents": "1", "notes": "1"}
    saved = saver.put(config, first, {"source": "input", "step": -1}, first["channel_versions"])
    config = {"configurable": {**saved["configurable"], **fenced}}
    saver.put_writes(config, [("notes", ["looked up"]), ("amount_cents", 700)], "task-a", "~a")
    saver.put_writes(config, [("__interrupt__", {"ask": 1})], "task-b")
    saver.put_writes(config, [("__interrupt__", {"ask": 2})], "task-b")  # replaced
    saver.put_writes(config, [("notes", ["again"])], "task-a", "~a")  # kept as it was
    second = empty_checkpoint()
    second["id"] = "1f0a0000-0000-6000-8000-000000000002"
    second["ts"] = "2026-11-06T10:00:01+00:00"
    second["channel_values"] = {"note": "late", "amount_cents": 700, "notes": ["looked up"]}
    second["channel_versions"] = {"note": "1", "amount_cents": "2", "notes": "2"}
    saver.put(config, second, {"source": "loop", "step": 0}, {"amount_cents": "2", "notes": "2"})


def test_a_fenced_write_stores_exactly_the_rows_upstreams_write_stores(transactional_db):
    ours = persistence.checkpointer()
    theirs = upstream_saver()
    ours_thread, theirs_thread = (f"contract-{uuid.uuid4().hex}" for _ in range(2))
    assert ours.claim_fence(ours_thread, 1)
    write_a_little_of_everything(ours, ours_thread, fence=1)
    write_a_little_of_everything(theirs, theirs_thread, fence=1)

    mine, upstream = stored_rows(ours_thread), stored_rows(theirs_thread)
    assert mine["checkpoints"] and mine["writes"]
    assert mine == upstream
    # And upstream's reads see the same thing in both.
    read = theirs.get_tuple({"configurable": {"thread_id": ours_thread, "checkpoint_ns": ""}})
    expected = theirs.get_tuple({"configurable": {"thread_id": theirs_thread, "checkpoint_ns": ""}})
    assert read.checkpoint == expected.checkpoint
    assert read.pending_writes == expected.pending_writes
    assert read.metadata == expected.metadata
