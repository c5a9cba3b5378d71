"""The fenced saver for PostgreSQL: PostgresSaver whose writes run in one pipelined transaction
with the fence check (upstream's SQL, copied; tests/test_checkpoint_contract.py compares)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from psycopg import Capabilities, Connection
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from refunds.persistence.fence import (
    CLAIM_SQL,
    HOLD_OR_FAIL_SQL,
    FenceLost,
    fence_of,
    next_config,
    write_rows,
)

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

    def __init__(
        self, conn: Connection[Any] | ConnectionPool[Any], *, serde: Any | None = None
    ) -> None:
        if not Capabilities().has_pipeline():
            raise RuntimeError("the fenced checkpoint writes need libpq 14 or newer (pipelines)")
        super().__init__(conn, serde=serde)
        self.encrypts = isinstance(self.serde, EncryptedSerializer)

    @contextmanager
    def _fenced_write(self, config: RunnableConfig) -> Iterator[Any]:
        fence = fence_of(config)
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
                    cur.execute(HOLD_OR_FAIL_SQL, fence)
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
        versions = dict(new_versions)
        if self.encrypts:
            # Upstream keeps strings and numbers in the checkpoint's JSON, in clear: encrypted,
            # they go to the blobs too, at their current version each time (a value stored
            # inline before keys were set has no blob yet; the blob's key makes it one row).
            known = checkpoint["channel_versions"]
            primitive = {
                k: inline.pop(k) for k, v in list(inline.items()) if v is not None and k in known
            }
            blob_values.update(primitive)
            versions |= {k: known[k] for k in primitive}
        stored = {**checkpoint, "channel_values": inline}
        blob_rows = [
            (thread_id, checkpoint_ns, k, version, *self.serde.dumps_typed(blob_values[k]))
            for k, version in versions.items()
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
        return next_config(thread_id, checkpoint_ns, checkpoint["id"])

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
        rows = write_rows(self.serde, config, writes, task_id, task_path)
        with self._fenced_write(config) as cur:
            cur.executemany(query, rows)

    def claim_fence(self, thread_id: str, epoch: int) -> bool:
        """Raise the thread's fence to `epoch` unless a newer one holds it; True when it holds."""
        with checkpoint_connection(self.conn) as conn:
            row = conn.execute(CLAIM_SQL, (thread_id, epoch)).fetchone()
        return row is not None
