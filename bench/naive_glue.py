"""Naive Celery glue: what a user would write instead of Refund Desk, as the second reference.

Two plain tasks, one calling `invoke` and one `invoke(Command(resume=...))`, on Celery's
defaults (early ack, prefetch 4). No lease, no mirror, no decision table, no recovery: a
redelivered resume runs the next node twice, a lost message loses the ticket. The only extra is
a Redis list per event so the benchmark driver learns that a thread paused or finished.

    celery -A bench.naive_glue worker     # BENCH_CHECKPOINT_URL, CELERY_BROKER_URL from env
"""

from __future__ import annotations

import json
import os
from functools import cache

from celery import Celery
from langgraph.types import Command

from bench._common import redis_client
from bench.reference import approved, compiled, fake_context, initial

BROKER = os.environ["CELERY_BROKER_URL"]
app = Celery("naive_glue", broker=BROKER)
app.conf.task_ignore_result = True
app.conf.worker_hijack_root_logger = False
PAUSED, DONE = "naive:paused", "naive:done"


@cache
def _graph():
    return compiled(os.environ["BENCH_CHECKPOINT_URL"])


@cache
def _redis():
    return redis_client(BROKER)


@app.task
def start(thread_id: str, number: str) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    paused = _graph().invoke(
        initial(thread_id, number), config, context=fake_context(), durability="sync"
    )
    # The review's answer travels with the wake-up, as a plain glue's "approve" button would.
    _redis().rpush(PAUSED, json.dumps([thread_id, approved(paused["__interrupt__"][0].value)]))


@app.task
def resume(thread_id: str, answer: dict) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    _graph().invoke(Command(resume=answer), config, context=fake_context(), durability="sync")
    _redis().rpush(DONE, json.dumps(thread_id))
