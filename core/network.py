"""No network wait inside a database transaction (DESIGN.md, invariant 6c): it would hold the
transaction's locks (SQLite's: the whole database) for as long as the other side takes."""

from __future__ import annotations

from django.db import connection


class NetworkInTransaction(RuntimeError):
    """A call to another system was made with a database transaction open on this thread."""


def outside_transaction(what: str) -> None:
    """Refuse to call `what` inside a transaction; a test case's wrapping one does not count."""
    blocks = connection.atomic_blocks
    if blocks and not blocks[-1]._from_testcase:  # type: ignore[attr-defined] # set in __init__; the stubs omit it
        raise NetworkInTransaction(
            f"{what} is never called inside a database transaction: it would hold the "
            "transaction's locks while it waits; call it after the transaction ends"
        )
