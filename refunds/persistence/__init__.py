"""The checkpointer and the store of this process, and the compiled graph on top of them.

Checkpoint writes are fenced: each run passes its lease epoch in the config (`fence`), and every
`put` and `put_writes` checks, in the same transaction as the write, that the thread's fence row
in the checkpoint database still holds that epoch. A worker that takes a thread over raises the
fence first (`claim_fence`), so a paused worker that wakes up after losing its lease cannot add a
checkpoint to the thread: no second branch, no stale state becoming the newest.

The write path is ours: the savers' `put` and `put_writes` (sqlite.py, postgres.py; the fence in
fence.py) send upstream's SQL (copied, public names only) inside a transaction they open and end,
with the fence check first. Reads stay upstream's. The packages are pinned exactly
(pyproject.toml) and tests/test_checkpoint_contract.py fails when an upgrade changes what these
copies must match (SQL text, schema, row layout).

Tables are created once per deploy (`setup_persistence`, run by migrate), never by workers racing
each other on an empty schema.
"""

from __future__ import annotations

import os
import select
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache, wraps
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils.module_loading import import_string
from langgraph.types import StateSnapshot
from psycopg import OperationalError
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from refunds.flow.graph import NodeWrapper, build_graph
from refunds.flow.tracking import TrackingOptions
from refunds.persistence.encryption import serializer
from refunds.persistence.fence import FENCE_TABLE
from refunds.persistence.fence import FenceLost as FenceLost
from refunds.persistence.postgres import FencedPostgresSaver, checkpoint_connection
from refunds.persistence.sealed_store import SealedStore
from refunds.persistence.sqlite import FencedSqliteSaver


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
    serde = serializer(settings.REFUNDS_CHECKPOINT_KEYS)
    if url.startswith("sqlite:///"):
        from langgraph.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite:///")
        return (
            FencedSqliteSaver(_open_sqlite(path, autocommit=False), serde=serde),
            SealedStore(SqliteStore(_open_sqlite(path, autocommit=True)), serde),
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
    return FencedPostgresSaver(pool, serde=serde), SealedStore(PostgresStore(pool), serde)


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
    the_store.inner.setup()
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
