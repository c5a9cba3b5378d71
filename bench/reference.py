"""The two references the full stack is compared with, on the same graph and checkpointer:

* bare LangGraph: `build_graph()` compiled with the checkpointer and store, run in one process
  with durability "sync" and fake collaborators (invoke to the interrupt, then resume);
* naive Celery glue (bench/naive_glue.py): two plain tasks doing the same from a worker.

No Django here: this is what someone would write without Refund Desk.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

from refunds import policy
from refunds.flow.graph import build_graph
from refunds.flow.state import Collaborators, Part

PROMISED = date(2026, 11, 2)


def order_facts(number: str) -> dict:
    """Deterministic orders: every one late, its own customer, fees either side of the limit."""
    i = int(number[1:])
    return {
        "number": number,
        "customer_name": f"Customer {i}",
        "customer_email": f"customer{i}@example.com",
        "promised_on": PROMISED.isoformat(),
        "delivered_on": (PROMISED + timedelta(days=3)).isoformat(),
        "fee_cents": 500 + (i * 37) % 4500,
        "refunded_cents": 0,
        "refunded_by_ticket": None,
    }


class FakeGateway:
    def __init__(self):
        self.charges: dict[str, str] = {}

    def __call__(
        self, *, key: str, amount_cents: int, order_number: str = "", parts: Any = None
    ) -> str:
        return self.charges.setdefault(key, f"rcpt_{len(self.charges):08d}")


class MemoryGateway:
    """The full stack's gateway in the benchmarks: the same nothing the bare graph's fake does
    (a dict in the worker process), so the comparison measures Refund Desk's own bookkeeping
    (lease, fence, ledger, outbox, mirror), not a payment processor's database."""

    charges: dict[str, str] = {}

    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
        parts: Sequence[Part] = (),
    ) -> str:
        # Unique across worker processes: the ledger's receipt column is UNIQUE.
        return self.charges.setdefault(idempotency_key, f"rcpt_{uuid.uuid4().hex[:16]}")

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
        return self.charges.get(idempotency_key)

    def payment_refunds(self, payment_reference: str) -> list:
        return []  # the benchmarks' orders name no payment: the ledger never asks

    def payment_disputes(self, payment_reference: str) -> list:
        return []  # nor for their disputes


def fake_context() -> Collaborators:
    def mailer(**_message: Any) -> None:
        return None

    return Collaborators(
        find_order=order_facts,
        pay=FakeGateway(),
        send_mail=mailer,
        agent_limit_cents=policy.DEFAULT_AGENT_LIMIT_CENTS,
        charge_retry_seconds=45.0,
    )


def open_persistence(url: str, serde: Any = None) -> tuple[Any, Any]:
    """A checkpointer and store as a LangGraph user opens them: same kinds and options as the
    app's runner (SQLite in WAL, or one psycopg ConnectionPool for PostgreSQL); `serde` is the
    savers' (LangGraph's EncryptedSerializer for the encrypted figures; the store has none)."""
    if url.startswith("sqlite:///"):
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        path = url.removeprefix("sqlite:///")

        def connect(autocommit: dict) -> sqlite3.Connection:
            # As SqliteSaver expects (its own transactions); the store wants autocommit.
            conn = sqlite3.connect(path, check_same_thread=False, timeout=30, **autocommit)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA synchronous=NORMAL")
            return conn

        return (
            SqliteSaver(connect({}), serde=serde),
            SqliteStore(connect({"isolation_level": None})),
        )
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=4,
        open=True,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    return PostgresSaver(pool, serde=serde), PostgresStore(pool)


def compiled(url: str, serde: Any = None):
    saver, store = open_persistence(url, serde)
    return build_graph().compile(checkpointer=saver, store=store)


def initial(thread_id: str, number: str) -> dict:
    return {
        "ticket_key": thread_id,
        "order_number": number,
        "order_numbers": [number],
        "note": "late",
        "flow_version": 1,
    }


APPROVE = {"answer": "approve", "reason": "", "reviewer": "bench"}


def approved(review: dict) -> dict:
    """APPROVE in the one shape the desk sends: every open order as proposed."""
    from refunds.flow import answers

    return APPROVE | {"orders": answers.expanded(review["orders"], answer="approve")}


def run_bare(url: str, numbers: list[str], prefix: str, serde: Any = None) -> dict:
    """Every ticket start to end in this process: invoke to the interrupt, then resume."""
    graph = compiled(url, serde)
    ctx = fake_context()
    cpu_before = time.process_time()
    started = time.perf_counter()
    for number in numbers:
        config = {"configurable": {"thread_id": f"{prefix}-{number}"}}
        paused = graph.invoke(
            initial(f"{prefix}-{number}", number), config, context=ctx, durability="sync"
        )
        (pending,) = paused["__interrupt__"]
        from langgraph.types import Command

        done = graph.invoke(
            Command(resume={pending.id: approved(pending.value)}),
            config,
            context=ctx,
            durability="sync",
        )
        assert done["outcome"] == "refunded", done
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    return {
        "tickets": len(numbers),
        "seconds": elapsed,
        "tickets_per_s": len(numbers) / elapsed,
        "cpu_ms_per_ticket": cpu * 1000 / len(numbers),
    }
