"""The checkpointer and the store of this process, and the compiled graph on top of them.

Checkpoint writes are fenced: each run passes its lease epoch in the config (`fence`), and every
`put` and `put_writes` checks, in the same transaction as the write, that the thread's fence row
in the checkpoint database still holds that epoch. A worker that takes a thread over raises the
fence first (`claim_fence`), so a paused worker that wakes up after losing its lease cannot add a
checkpoint to the thread: no second branch, no stale state becoming the newest.

Tables are created once per deploy (`setup_persistence`, run by migrate), never by workers racing
each other on an empty schema.
"""

from __future__ import annotations

import os
import select
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils.module_loading import import_string
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres import _internal as pg_internal
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import StateSnapshot
from psycopg import OperationalError
from psycopg import errors as pg_errors
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from refunds.flow.graph import NodeWrapper, build_graph
from refunds.flow.tracking import TrackingOptions

FENCE_TABLE = "refunds_thread_fence"
_FENCE: ContextVar[tuple[str, int] | None] = ContextVar("refunds_fence", default=None)


class FenceLost(Exception):  # noqa: N818
    """A checkpoint write carried an epoch older than the thread's fence: another worker holds
    the thread now. Nothing was written."""


@contextmanager
def _fenced(config: dict) -> Iterator[None]:
    fence = config.get("configurable", {}).get("fence")
    token = _FENCE.set((str(config["configurable"]["thread_id"]), int(fence)) if fence else None)
    try:
        yield
    finally:
        _FENCE.reset(token)


class FencedSqliteSaver(SqliteSaver):
    """SqliteSaver whose writes check the thread's fence in the same transaction.

    The connection keeps Python's default isolation level, as SqliteSaver expects: each `put` and
    `put_writes` is one transaction, committed at its end. (In autocommit mode `put_writes`
    committed row by row, and a kill in the middle left a task half-written, which LangGraph reads
    as finished.)"""

    def setup(self) -> None:
        if self.is_setup:
            return
        super().setup()
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {FENCE_TABLE} "
            "(thread_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL)"
        )
        self.conn.commit()

    @contextmanager
    def cursor(self, transaction: bool = True) -> Iterator[sqlite3.Cursor]:
        fence = _FENCE.get()
        with super().cursor(transaction) as cur:
            try:
                if fence is not None and transaction:
                    # A write: it opens the transaction and takes SQLite's write lock, so the
                    # check and the rows that follow commit together or not at all.
                    cur.execute(_HOLD_SQL.replace("%s", "?"), fence)
                    if cur.rowcount != 1:
                        raise FenceLost(f"thread {fence[0]}: epoch {fence[1]} no longer holds")
                yield cur
            except BaseException:
                self.conn.rollback()  # never let the base class commit half a write
                raise

    def put(self, config, checkpoint, metadata, new_versions):
        with _fenced(config):
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        with _fenced(config):
            return super().put_writes(config, writes, task_id, task_path)

    def get_next_version(self, current, channel):
        """Channel versions as small integers. SqliteSaver's own are 49-character strings (a
        counter and a random part), and every checkpoint repeats one per channel and per node
        that saw it: more than half of a checkpoint's bytes. The random part serves savers that
        key stored values by version (PostgresSaver's blobs); this one stores values inline.
        A thread begun with string versions keeps them: LangGraph compares versions."""
        if isinstance(current, str):
            return super().get_next_version(current, channel)
        return (current or 0) + 1

    def claim_fence(self, thread_id: str, epoch: int) -> bool:
        with self.lock:
            self.setup()
            row = self.conn.execute(_CLAIM_SQL.replace("%s", "?"), (thread_id, epoch)).fetchone()
            self.conn.commit()
        return row is not None


class FencedPostgresSaver(PostgresSaver):
    """PostgresSaver whose writes run in one transaction with the fence check, pipelined: the
    check, the blobs and the checkpoint (or the writes) go to the server in one round trip.

    No BEGIN/COMMIT: in pipeline mode everything the server receives before the one Sync (sent
    when the pipeline closes) is a single implicit transaction, committed at the Sync or rolled
    back whole if any statement failed (PostgreSQL's protocol docs, "Pipelining";
    tests/test_persistence.py checks it). psycopg's `conn.transaction()` inside a pipeline would
    add two more Syncs, each a round trip. A fence that does not hold makes the check divide by
    zero, which aborts the transaction and the statements queued behind it."""

    @contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
        fence = _FENCE.get()
        if fence is None:
            with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        try:
            with (
                self.lock,
                pg_internal.get_connection(self.conn) as conn,
                conn.pipeline(),
                conn.cursor(binary=True, row_factory=dict_row) as cur,
            ):
                cur.execute(_HOLD_OR_FAIL_SQL, fence)
                yield cur
        except pg_errors.DivisionByZero:
            raise FenceLost(f"thread {fence[0]}: epoch {fence[1]} no longer holds") from None

    def put(self, config, checkpoint, metadata, new_versions):
        with _fenced(config):
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        with _fenced(config):
            return super().put_writes(config, writes, task_id, task_path)

    def claim_fence(self, thread_id: str, epoch: int) -> bool:
        with pg_internal.get_connection(self.conn) as conn:
            row = conn.execute(_CLAIM_SQL, (thread_id, epoch)).fetchone()
        return row is not None


# In the transaction of every checkpoint write: the fence is ours (raised to our epoch if an
# older one held it, or written if the thread has none); a newer epoch changes nothing and the
# write is refused. Taking it over from an older epoch without an explicit claim is safe: a grant
# after a lapsed lease (the only way an older writer can still be alive) claims before it reads.
_HOLD_SQL = (
    f"INSERT INTO {FENCE_TABLE} (thread_id, epoch) VALUES (%s, %s) "
    f"ON CONFLICT (thread_id) DO UPDATE SET epoch = excluded.epoch "
    f"WHERE {FENCE_TABLE}.epoch <= excluded.epoch"
)
# PostgreSQL, pipelined: the same, failing the transaction when the fence is not ours.
_HOLD_OR_FAIL_SQL = (
    f"WITH held AS ({_HOLD_SQL} RETURNING 1) SELECT 1 / (SELECT count(*) FROM held)::int"
)
# Raise the fence to this epoch unless a newer one holds it; a row comes back when it holds.
_CLAIM_SQL = (
    f"INSERT INTO {FENCE_TABLE} (thread_id, epoch) VALUES (%s, %s) "
    f"ON CONFLICT (thread_id) DO UPDATE SET epoch = excluded.epoch "
    f"WHERE excluded.epoch >= {FENCE_TABLE}.epoch RETURNING epoch"
)


def checkpoint_url() -> str:
    if settings.CHECKPOINT_URL:
        return settings.CHECKPOINT_URL
    db = connections["default"].settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}-checkpoints"
    return make_conninfo(
        dbname=db["NAME"],
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
    )


def _open_sqlite(path: str, *, autocommit: bool) -> sqlite3.Connection:
    # The saver wants Python's default (transactions it commits); the store issues its own
    # BEGIN/COMMIT and wants autocommit, as SqliteStore.from_conn_string opens it.
    if autocommit:
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


@cache
def _persistence(pid: int) -> tuple[Any, Any]:
    """(checkpointer, store) for this process; keyed by pid so a forked pool child opens its own."""
    url = checkpoint_url()
    if url.startswith("sqlite:///"):
        from langgraph.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite:///")
        return (
            FencedSqliteSaver(_open_sqlite(path, autocommit=False)),
            SqliteStore(_open_sqlite(path, autocommit=True)),
        )
    from langgraph.store.postgres import PostgresStore

    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=settings.CHECKPOINT_POOL_SIZE,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        # A connection the database dropped (a restart, pg_terminate_backend) is noticed and
        # replaced when it is taken from the pool, not handed to a run.
        check=_check_without_round_trip,
        open=True,
    )
    return FencedPostgresSaver(pool), PostgresStore(pool)


def _check_without_round_trip(conn: Any) -> None:
    """The pool's check on every checkout, without the round trip of psycopg's own (an empty
    query, ten or more per advance). An idle connection has nothing to read unless the server
    sent something unasked: its goodbye before it closed the connection (a restart,
    pg_terminate_backend) or the end of the stream. Only then is the real check run, which
    raises for a dead connection, so the pool replaces it."""
    if conn.closed or conn.broken:
        raise OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)


def checkpointer() -> FencedSqliteSaver | FencedPostgresSaver:
    return _persistence(os.getpid())[0]


def store() -> Any:
    return _persistence(os.getpid())[1]


def setup_persistence() -> None:
    """Create the checkpoint, store and fence tables. Run once at deploy (migrate runs it)."""
    saver, the_store = _persistence(os.getpid())
    saver.setup()
    the_store.setup()
    if isinstance(saver, FencedPostgresSaver):
        with pg_internal.get_connection(saver.conn) as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {FENCE_TABLE} "
                "(thread_id TEXT PRIMARY KEY, epoch BIGINT NOT NULL)"
            )


def close_persistence() -> None:
    """Close this process's checkpoint connections (a test run drops its database after)."""
    if _persistence.cache_info().currsize:
        saver, the_store = _persistence(os.getpid())
        for conn in {id(saver.conn): saver.conn, id(the_store.conn): the_store.conn}.values():
            conn.close()  # one shared pool on PostgreSQL, two connections on SQLite
    _persistence.cache_clear()
    _compiled.cache_clear()


def tracking_options() -> TrackingOptions | None:
    """The carrier's tracking step, when a carrier is configured (REFUNDS_CARRIER)."""
    if not settings.REFUNDS_CARRIER:
        return None
    return TrackingOptions(
        timeout=settings.REFUNDS_CARRIER_TIMEOUT, attempts=settings.REFUNDS_CARRIER_ATTEMPTS
    )


@cache
def _compiled(pid: int, wrapper: Callable | None, tracking: TrackingOptions | None = None):
    saver, the_store = _persistence(pid)
    return build_graph(wrap=wrapper, tracking=tracking).compile(checkpointer=saver, store=the_store)


def node_wrapper() -> NodeWrapper | None:
    """REFUNDS_NODE_WRAPPER: a dotted path to a function that wraps every node (crash tests set
    it to devtools' crash points); empty in production."""
    path = settings.REFUNDS_NODE_WRAPPER
    return import_string(path) if path else None


def graph():
    return _compiled(os.getpid(), node_wrapper(), tracking_options())


def thread_config(thread_id: str, **extra: Any) -> dict:
    return {"configurable": {"thread_id": thread_id, **extra}}


def snapshot(thread_id: str) -> StateSnapshot:
    return graph().get_state(thread_config(thread_id))


def history(thread_id: str) -> list[StateSnapshot]:
    return list(graph().get_state_history(thread_config(thread_id)))
