"""What the functional-API workflows (the intake, the erasure) share: a task starts only once
the previous task's result is in the checkpoint, and not at all once its run was told to drain."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from langgraph.errors import GraphDrained
from langgraph.func import task

from refunds import lease as leases

TaskWrapper = Callable[[str, Callable[..., Any]], Callable[..., Any]]


def tasks(
    workflow: str,
    functions: dict[str, Callable[..., Any]],
    checkpointer: Any,
    lease: Callable[[], leases.Lease],
    wrap: TaskWrapper | None = None,
) -> dict[str, Any]:
    """The workflow's @tasks, each started after_saved; `wrap` wraps each, named
    "<workflow>:<name>" (the crash tests' points)."""
    return {
        name: task(name=name)(
            after_saved(wrap(f"{workflow}:{name}", fn) if wrap else fn, checkpointer, lease)
        )
        for name, fn in functions.items()
    }


def after_saved(
    fn: Callable[..., Any], checkpointer: Any, lease: Callable[[], leases.Lease]
) -> Callable[..., Any]:
    """`fn`, once the previous task's result is in the checkpoint: LangGraph saves it in the
    background, and a kill before it lands would lose a result whose task made its effect.
    Every task takes an item with its `thread_id` first, and the earlier tasks' results after."""

    def saved_first(item: Any, *earlier: Any) -> Any:
        config: Any = {"configurable": {"thread_id": item["thread_id"], "checkpoint_ns": ""}}
        deadline = time.monotonic() + settings.REFUNDS_LEASE_SECONDS / 3
        while earlier and earlier[-1] not in _saved_results(checkpointer, config):
            if time.monotonic() > deadline:  # its save was refused (the fence) or never came
                raise GraphDrained(f"{item['thread_id']}: an earlier task's result was not saved")
            time.sleep(0.005)
        if draining := lease().drain_reason:
            raise GraphDrained(draining)
        return fn(item, *earlier)

    return saved_first


def _saved_results(checkpointer: Any, config: Any) -> list[Any]:
    saved = checkpointer.get_tuple(config)
    return [value for _, _, value in saved.pending_writes or []] if saved else []
