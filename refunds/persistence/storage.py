"""What a thread's checkpoints weigh, and pruning them (for ops' history page and prune). Reads
the checkpointer's own tables (one statement each), so the history page knows every checkpoint's
parent without loading them all; only persistence touches those tables."""

from __future__ import annotations

from dataclasses import dataclass

from refunds import persistence


@dataclass(frozen=True)
class Row:
    checkpoint_id: str
    parent_id: str | None
    bytes: int


def checkpoint_rows(thread_id: str) -> list[Row]:
    """Every checkpoint of the thread (root namespace), oldest first, with its size in bytes
    (the checkpoint, its metadata and the writes saved against it)."""
    saver = persistence.checkpointer()
    if isinstance(saver, persistence.FencedSqliteSaver):
        sql = (
            "SELECT c.checkpoint_id, c.parent_checkpoint_id, "
            "length(c.checkpoint) + length(c.metadata) + coalesce((SELECT sum(length(w.value)) "
            "FROM writes w WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns "
            "AND w.checkpoint_id = c.checkpoint_id), 0) "
            "FROM checkpoints c WHERE c.thread_id = ? AND c.checkpoint_ns = '' "
            "ORDER BY c.checkpoint_id"
        )
        with saver.lock:
            rows = saver.conn.execute(sql, (thread_id,)).fetchall()
        return [Row(r[0], r[1], int(r[2] or 0)) for r in rows]
    sql = (
        "SELECT c.checkpoint_id, c.parent_checkpoint_id, "
        "pg_column_size(c.checkpoint) + pg_column_size(c.metadata) + coalesce((SELECT "
        "sum(length(w.blob)) FROM checkpoint_writes w WHERE w.thread_id = c.thread_id AND "
        "w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id), 0) AS size "
        "FROM checkpoints c WHERE c.thread_id = %s AND c.checkpoint_ns = '' "
        "ORDER BY c.checkpoint_id"
    )
    with persistence.checkpoint_connection(saver.conn) as conn:
        rows = conn.execute(sql, (thread_id,)).fetchall()
    return [Row(r["checkpoint_id"], r["parent_checkpoint_id"], int(r["size"] or 0)) for r in rows]


def blob_bytes(thread_id: str) -> int:
    """PostgreSQL keeps channel values apart from checkpoints (by version): their bytes."""
    saver = persistence.checkpointer()
    if isinstance(saver, persistence.FencedSqliteSaver):
        return 0
    with persistence.checkpoint_connection(saver.conn) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(length(blob)), 0) AS size FROM checkpoint_blobs "
            "WHERE thread_id = %s",
            (thread_id,),
        ).fetchone()
    return int(row["size"]) if row is not None else 0  # an aggregate: always one row


def thread_bytes(thread_id: str, rows: list[Row] | None = None) -> int:
    rows = checkpoint_rows(thread_id) if rows is None else rows
    return sum(r.bytes for r in rows) + blob_bytes(thread_id)


def keep_latest(thread_id: str) -> int:
    """Remove every checkpoint of the thread but the newest (and the writes of the removed ones).
    Returns how many were removed."""
    saver = persistence.checkpointer()
    if isinstance(saver, persistence.FencedSqliteSaver):
        with saver.lock:
            cur = saver.conn.cursor()
            latest = cur.execute(
                "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ? "
                "AND checkpoint_ns = ''",
                (thread_id,),
            ).fetchone()[0]
            if latest is None:
                return 0
            cur.execute(
                "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id <> ?",
                (thread_id, latest),
            )
            removed = cur.execute(
                "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id <> ?",
                (thread_id, latest),
            ).rowcount
            # The kept one has no parent left: say so, rather than point at nothing.
            cur.execute(
                "UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ? "
                "AND checkpoint_id = ?",
                (thread_id, latest),
            )
            saver.conn.commit()
        return removed
    before = len(checkpoint_rows(thread_id))
    saver.prune([thread_id], strategy="keep_latest")
    return max(before - len(checkpoint_rows(thread_id)), 0)
