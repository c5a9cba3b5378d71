"""The fence of each thread in the checkpoint database: which epoch may write its checkpoints,
and the statements both savers (sqlite.py, postgres.py) check and raise it with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP

FENCE_TABLE = "refunds_thread_fence"


class FenceLost(Exception):  # noqa: N818
    """A checkpoint write carried an epoch older than the thread's fence: another worker holds
    the thread now. Nothing was written."""


def fence_of(config: RunnableConfig) -> tuple[str, int] | None:
    """(thread_id, epoch) when the write is a run's (fenced), None for an unfenced write."""
    configurable = config["configurable"]
    fence = configurable.get("fence")
    return (str(configurable["thread_id"]), int(fence)) if fence else None


def next_config(thread_id: Any, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


# In the transaction of every checkpoint write: the fence is ours (raised to our epoch if an
# older one held it, or written if the thread has none); a newer epoch changes nothing and the
# write is refused. Taking it over from an older epoch without an explicit claim is safe: a grant
# after a lapsed lease (the only way an older writer can still be alive) claims before it reads.
_HOLD_SQL = (
    f"INSERT INTO {FENCE_TABLE} (thread_id, epoch) VALUES (%s, %s) "
    f"ON CONFLICT (thread_id) DO UPDATE SET epoch = excluded.epoch "
    f"WHERE {FENCE_TABLE}.epoch <= excluded.epoch"
)
HOLD_SQLITE = _HOLD_SQL.replace("%s", "?")
# PostgreSQL, pipelined: the same, failing the transaction when the fence is not ours.
HOLD_OR_FAIL_SQL = (
    f"WITH held AS ({_HOLD_SQL} RETURNING 1) SELECT 1 / (SELECT count(*) FROM held)::int"
)
# Raise the fence to this epoch unless a newer one holds it; a row comes back when it holds.
CLAIM_SQL = (
    f"INSERT INTO {FENCE_TABLE} (thread_id, epoch) VALUES (%s, %s) "
    f"ON CONFLICT (thread_id) DO UPDATE SET epoch = excluded.epoch "
    f"WHERE excluded.epoch >= {FENCE_TABLE}.epoch RETURNING epoch"
)
CLAIM_SQLITE = CLAIM_SQL.replace("%s", "?")


def write_rows(
    serde: Any, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, path: str
) -> list[tuple]:
    """A task's writes as upstream's savers store them (checkpoint_writes rows), for both."""
    configurable = config["configurable"]
    return [
        (
            str(configurable["thread_id"]),
            str(configurable["checkpoint_ns"]),
            str(configurable["checkpoint_id"]),
            task_id,
            path,
            WRITES_IDX_MAP.get(channel, idx),
            channel,
            *serde.dumps_typed(value),
        )
        for idx, (channel, value) in enumerate(writes)
    ]
