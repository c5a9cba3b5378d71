"""No network wait inside a database transaction (DESIGN.md, invariant 6c): on SQLite an open
write transaction holds the whole database, on PostgreSQL its row locks, for as long as the
other side takes to answer. Every call to another system (the payment gateway, the mail server
or provider, the chat model, the shop's order source, the carrier, a webhook's endpoint) checks
it first; a caller that breaks the rule fails at once, in tests as in production, before any
byte leaves."""

from __future__ import annotations

from django.db import connection


class NetworkInTransaction(RuntimeError):
    """A call to another system was made with a database transaction open on this thread."""


def outside_transaction(what: str) -> None:
    """Refuse to call `what` (another system, in words) while this thread is in a transaction.
    As Django's own durable atomic blocks decide it: a test case's wrapping transaction, which
    stands for autocommit, does not count."""
    blocks = connection.atomic_blocks
    if blocks and not blocks[-1]._from_testcase:  # type: ignore[attr-defined] # set in __init__; the stubs omit it
        raise NetworkInTransaction(
            f"{what} is never called inside a database transaction: it would hold the "
            "transaction's locks while it waits; call it after the transaction ends"
        )
