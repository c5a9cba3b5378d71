"""The fenced saver for SQLite: SqliteSaver whose writes check the thread's fence in the same
transaction (upstream's SQL, copied; tests/test_checkpoint_contract.py compares)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.sqlite import SqliteSaver

from refunds.persistence.fence import (
    CLAIM_SQLITE,
    FENCE_TABLE,
    HOLD_SQLITE,
    FenceLost,
    fence_of,
    next_config,
    write_rows,
)

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
        fence = fence_of(config)
        with self.lock:
            self.setup()
            cur = self.conn.cursor()
            try:
                if fence is not None:
                    cur.execute(HOLD_SQLITE, fence)
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
        return next_config(thread_id, checkpoint_ns, checkpoint["id"])

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
        rows = write_rows(self.serde, config, writes, task_id, task_path)
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
            row = self.conn.execute(CLAIM_SQLITE, (thread_id, epoch)).fetchone()
            self.conn.commit()
        return row is not None
