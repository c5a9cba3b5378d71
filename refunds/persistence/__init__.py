"""The checkpointer and the store of this process, and the compiled graph on top of them.

Checkpoint writes are fenced: each run passes its lease epoch in the config (`fence`), and every
`put` and `put_writes` checks, in the same transaction as the write, that the thread's fence row
in the checkpoint database still holds that epoch. A worker that takes a thread over raises the
fence first (`claim_fence`), so a paused worker that wakes up after losing its lease cannot add a
checkpoint to the thread: no second branch, no stale state becoming the newest.

The write path is ours: `put` and `put_writes` below send upstream's SQL (copied, public names
only) inside a transaction this module opens and ends, with the fence check first. Reads stay
upstream's. The packages are pinned exactly (pyproject.toml) and tests/test_checkpoint_contract.py
fails when an upgrade changes what these copies must match (SQL text, schema, row layout).

Tables are created once per deploy (`setup_persistence`, run by migrate), never by workers racing
each other on an empty schema.
"""

from __future__ import annotations

import json
import os
import select
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache, wraps
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils.module_loading import import_string
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import StateSnapshot
from psycopg import Capabilities, Connection, OperationalError
from psycopg import errors as pg_errors
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from refunds.flow.graph import NodeWrapper, build_graph
from refunds.flow.tracking import TrackingOptions

FENCE_TABLE = "refunds_thread_fence"


class FenceLost(Exception):  # noqa: N818
    """A checkpoint write carried an epoch older than the thread's fence: another worker holds
    the thread now. Nothing was written."""


def _fence_of(config: RunnableConfig) -> tuple[str, int] | None:
    """(thread_id, epoch) when the write is a run's (fenced), None for an unfenced write."""
    configurable = config["configurable"]
    fence = configurable.get("fence")
    return (str(configurable["thread_id"]), int(fence)) if fence else None


def _next_config(thread_id: Any, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


# SqliteSaver 3.1.2's statements, copied from its put and put_writes (the contract test compares).
SQLITE_PUT_CHECKPOINT_SQL = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
    "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
SQLITE_UPSERT_WRITES_SQL = (
    "INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, "
    "idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SQLITE_INSERT_WRITES_SQL = SQLITE_UPSERT_WRITES_SQL.replace("OR REPLACE", "OR IGNORE")


class FencedSqliteSaver(SqliteSaver):
    """SqliteSaver whose writes check the thread's fence in the same transaction.

    The connection keeps Python's default isolation level, as SqliteSaver expects: the fence
    check (an INSERT) opens the transaction and takes SQLite's write lock, the rows follow, and
    one COMMIT ends it; anything raised in between rolls all of it back. (In autocommit mode
    `put_writes` committed row by row, and a kill in the middle left a task half-written, which
    LangGraph reads as finished.)"""

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
    def _fenced_write(self, config: RunnableConfig) -> Iterator[sqlite3.Cursor]:
        fence = _fence_of(config)
        with self.lock:
            self.setup()
            cur = self.conn.cursor()
            try:
                if fence is not None:
                    cur.execute(_HOLD_SQLITE, fence)
                    if cur.rowcount != 1:
                        raise FenceLost(f"thread {fence[0]}: epoch {fence[1]} no longer holds")
                yield cur
                self.conn.commit()
            except BaseException:
                self.conn.rollback()  # never leave half a write for a later commit
                raise
            finally:
                cur.close()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """SqliteSaver.put's rows, fenced."""
        thread_id = config["configurable"]["thread_id"]
        checkpoint_ns = config["configurable"]["checkpoint_ns"]
        type_, serialized_checkpoint = self.serde.dumps_typed(checkpoint)
        serialized_metadata = json.dumps(
            get_checkpoint_metadata(config, metadata), ensure_ascii=False
        ).encode("utf-8", "ignore")
        with self._fenced_write(config) as cur:
            cur.execute(
                SQLITE_PUT_CHECKPOINT_SQL,
                (
                    str(thread_id),
                    checkpoint_ns,
                    checkpoint["id"],
                    config["configurable"].get("checkpoint_id"),
                    type_,
                    serialized_checkpoint,
                    serialized_metadata,
                ),
            )
        return _next_config(thread_id, checkpoint_ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """SqliteSaver.put_writes's rows, fenced. Special channels (errors, interrupts) replace
        their row; ordinary writes of a task already saved are kept, as upstream does."""
        query = (
            SQLITE_UPSERT_WRITES_SQL
            if all(w[0] in WRITES_IDX_MAP for w in writes)
            else SQLITE_INSERT_WRITES_SQL
        )
        configurable = config["configurable"]
        rows = [
            (
                str(configurable["thread_id"]),
                str(configurable["checkpoint_ns"]),
                str(configurable["checkpoint_id"]),
                task_id,
                task_path,
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                *self.serde.dumps_typed(value),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        with self._fenced_write(config) as cur:
            cur.executemany(query, rows)

    def get_next_version(self, current: Any, channel: None) -> Any:
        """Channel versions as small integers. SqliteSaver's own are 49-character strings (a
        counter and a random part), and every checkpoint repeats one per channel and per node
        that saw it: more than half of a checkpoint's bytes. The random part serves savers that
        key stored values by version (PostgresSaver's blobs); this one stores values inline.
        A thread begun with string versions keeps them: LangGraph compares versions."""
        if isinstance(current, str):
            return super().get_next_version(current, channel)
        return (current or 0) + 1

    def claim_fence(self, thread_id: str, epoch: int) -> bool:
        """Raise the thread's fence to `epoch` unless a newer one holds it; True when it holds."""
        with self.lock:
            self.setup()
            row = self.conn.execute(_CLAIM_SQLITE, (thread_id, epoch)).fetchone()
            self.conn.commit()
        return row is not None


# PostgresSaver 3.2.0's statements (BasePostgresSaver's class attributes of the same names; the
# contract test compares them).
PG_UPSERT_CHECKPOINT_BLOBS_SQL = """
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    VALUES (%s, %s, %s, %s, %s, %s)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
"""
PG_UPSERT_CHECKPOINTS_SQL = """
    INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
    VALUES (%s, %s, %s, %s, %s, %s)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
    DO UPDATE SET
        checkpoint = EXCLUDED.checkpoint,
        metadata = EXCLUDED.metadata;
"""  # noqa: E501
PG_UPSERT_CHECKPOINT_WRITES_SQL = """
    INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
        channel = EXCLUDED.channel,
        type = EXCLUDED.type,
        blob = EXCLUDED.blob;
"""  # noqa: E501
PG_INSERT_CHECKPOINT_WRITES_SQL = """
    INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING
"""  # noqa: E501


@contextmanager
def checkpoint_connection(conn: Connection[Any] | ConnectionPool[Any]) -> Iterator[Connection[Any]]:
    """A connection of the checkpoint database: the saver's own, or one from its pool."""
    if isinstance(conn, ConnectionPool):
        with conn.connection() as pooled:
            yield pooled
    else:
        yield conn


class FencedPostgresSaver(PostgresSaver):
    """PostgresSaver whose writes run in one transaction with the fence check, pipelined: the
    check, the blobs and the checkpoint (or the writes) go to the server in one round trip.

    No BEGIN/COMMIT: on an autocommit connection in pipeline mode everything the server receives
    before the one Sync (sent when the pipeline closes) is a single implicit transaction,
    committed at the Sync or rolled back whole if any statement failed (PostgreSQL's protocol
    docs, "Pipelining"; tests/test_persistence.py checks it). psycopg's `conn.transaction()`
    inside a pipeline would add two more Syncs, each a round trip. A fence that does not hold
    makes the check divide by zero, which aborts the transaction and the statements queued
    behind it.

    Channel values are stored as PostgresSaver stores them (primitives inline in the checkpoint,
    the rest in checkpoint_blobs by version), except a DeltaChannel's snapshots, which the refund
    graph does not use (the contract test checks that it does not)."""

    def __init__(self, conn: Connection[Any] | ConnectionPool[Any]) -> None:
        if not Capabilities().has_pipeline():
            raise RuntimeError("the fenced checkpoint writes need libpq 14 or newer (pipelines)")
        super().__init__(conn)

    @contextmanager
    def _fenced_write(self, config: RunnableConfig) -> Iterator[Any]:
        fence = _fence_of(config)
        try:
            with (
                self.lock,
                checkpoint_connection(self.conn) as conn,
                conn.pipeline(),
                conn.cursor(binary=True, row_factory=dict_row) as cur,
            ):
                if not conn.autocommit:
                    # The pipeline's implicit transaction is the whole write only in autocommit.
                    raise RuntimeError("the checkpoint connection must be in autocommit mode")
                if fence is not None:
                    cur.execute(_HOLD_OR_FAIL_SQL, fence)
                yield cur
        except pg_errors.DivisionByZero:
            assert fence is not None
            raise FenceLost(f"thread {fence[0]}: epoch {fence[1]} no longer holds") from None

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """PostgresSaver.put's rows, fenced."""
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        checkpoint_ns = configurable["checkpoint_ns"]
        inline = dict(checkpoint["channel_values"])
        blob_values = {
            k: inline.pop(k)
            for k, v in checkpoint["channel_values"].items()
            if not (v is None or isinstance(v, str | int | float | bool))
        }
        stored = {**checkpoint, "channel_values": inline}
        blob_rows = [
            (thread_id, checkpoint_ns, k, version, *self.serde.dumps_typed(blob_values[k]))
            for k, version in new_versions.items()
            if k in blob_values
        ]
        with self._fenced_write(config) as cur:
            if blob_rows:
                cur.executemany(PG_UPSERT_CHECKPOINT_BLOBS_SQL, blob_rows)
            cur.execute(
                PG_UPSERT_CHECKPOINTS_SQL,
                (
                    thread_id,
                    checkpoint_ns,
                    checkpoint["id"],
                    configurable.get("checkpoint_id"),
                    Jsonb(stored),
                    Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
                ),
            )
        return _next_config(thread_id, checkpoint_ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """PostgresSaver.put_writes's rows, fenced."""
        query = (
            PG_UPSERT_CHECKPOINT_WRITES_SQL
            if all(w[0] in WRITES_IDX_MAP for w in writes)
            else PG_INSERT_CHECKPOINT_WRITES_SQL
        )
        configurable = config["configurable"]
        rows = [
            (
                configurable["thread_id"],
                configurable["checkpoint_ns"],
                configurable["checkpoint_id"],
                task_id,
                task_path,
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                *self.serde.dumps_typed(value),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        with self._fenced_write(config) as cur:
            cur.executemany(query, rows)

    def claim_fence(self, thread_id: str, epoch: int) -> bool:
        """Raise the thread's fence to `epoch` unless a newer one holds it; True when it holds."""
        with checkpoint_connection(self.conn) as conn:
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
_HOLD_SQLITE = _HOLD_SQL.replace("%s", "?")
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
_CLAIM_SQLITE = _CLAIM_SQL.replace("%s", "?")


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
        with checkpoint_connection(saver.conn) as conn:
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


# The thread that runs the graph; LangGraph copies it into the threads of its pool.
_invoker: ContextVar[int | None] = ContextVar("graph_invoker", default=None)


@contextmanager
def invoked_here() -> Iterator[None]:
    """Run the graph from this thread: nodes that LangGraph runs on threads of its own (a step of
    several tasks: `Send`, parallel checks) close those threads' database connections at the end,
    as a worker closes its own between tasks; otherwise each would stay open, unseen."""
    token = _invoker.set(threading.get_ident())
    try:
        yield
    finally:
        _invoker.reset(token)


def _on_managed_connections(fn: Callable) -> Callable:
    @wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            if _invoker.get() not in (None, threading.get_ident()):
                connections.close_all()

    return run


@cache
def _compiled(pid: int, wrapper: NodeWrapper | None, tracking: TrackingOptions | None = None):
    saver, the_store = _persistence(pid)

    def wrap(name: str, fn: Callable) -> Callable:
        return _on_managed_connections(wrapper(name, fn) if wrapper else fn)

    return build_graph(wrap=wrap, tracking=tracking).compile(checkpointer=saver, store=the_store)


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
