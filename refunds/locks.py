"""A lock held across one effect (a gateway call, an SMTP conversation) for its key.

The lease epoch fences every write, but a process paused *between* its last check and the call
itself (SIGSTOP, a long GC pause) would still make the call when it wakes. This lock closes that
gap: the process holds it from its claim until the effect is recorded, a paused process keeps
holding it, and a successor that finds it held waits (EffectBusy) instead of acting twice. A
process that dies releases it: the kernel drops a file lock, PostgreSQL drops an advisory lock
with the session.

- SQLite (one machine): `flock` on one of 1,024 lock files in the data folder, by key hash.
- PostgreSQL (many machines): `pg_try_advisory_lock` on the worker's own connection. It costs no
  round trip of its own on the hot path: the effect's first statement takes it (`cte`, or
  `claiming` for a data-modifying one) and its last gives it back (`execute_releasing`); only a
  path that never reaches such a statement gives it back with a statement of its own.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from core import sql

STRIPES = 1024


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True)


class EffectLock:
    """The lock of one effect's key, as `effect_lock()` hands it out. `held` says whether this
    process holds it; on PostgreSQL it may also be "asked": a statement that takes it was sent
    and its answer not read (the statement failed), so leaving gives it back to be sure."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.id = _hash(key)
        self.postgres = connection.vendor == "postgresql"
        self.held = False
        self._asked = False
        self._fd: int | None = None

    def take(self) -> bool:
        """Take it now, with a statement of its own on PostgreSQL."""
        if not self.postgres:
            return self._flock()
        row = sql.fetchone("SELECT pg_try_advisory_lock(%s)", [self.id])
        return self.answered(bool(row and row[0]))

    def taking(self) -> tuple[str, list]:
        """An SQL expression, with its params, for the caller's next statement: on SQLite the
        file lock is taken now and the expression is its answer; once held (on either database)
        a plain true. Hand what it read to `answered()`. On PostgreSQL a lock not yet held is
        taken in a CTE of its own instead (`cte()`)."""
        if self.held:  # taken by an earlier statement of the same effect
            return ("TRUE" if self.postgres else "1"), []
        if self.postgres:
            raise RuntimeError("on PostgreSQL the lock is taken in a CTE of its own: cte()")
        return ("1" if self._flock() else "0"), []

    def cte(self) -> tuple[str, list]:
        """On PostgreSQL, a WITH item `lk` of one row whose `held` takes the lock, and its
        params: put it first and read `lk.held` (then hand it to `answered()`). MATERIALIZED
        and apart from any row-locking SELECT, it is evaluated once: inside a SELECT ... FOR
        UPDATE, PostgreSQL's re-check of a row that changed while the statement waited on it
        may ask again and stack the lock (one release then leaves it held: seen with a plain call
        in the target list, and with a subquery once that SELECT sat in a WITH)."""
        self._asked = True
        return "lk AS MATERIALIZED (SELECT pg_try_advisory_lock(%s) AS held)", [self.id]

    def answered(self, value: Any) -> bool:
        self._asked = False
        self.held = bool(value)
        return self.held

    def claiming(self, statement: str, params: list) -> tuple | None:
        """Run `statement`, a data-modifying statement with RETURNING whose rows come `FROM lk
        WHERE lk.held`, with the lock taken first in the same statement. Its one row, or None;
        `held` tells whether the lock was taken (nothing is written without it)."""
        if not self.postgres:
            if not self._flock():
                return None
            return sql.fetchone(f"WITH lk AS (SELECT 1 AS held) {statement}", params)
        lk, lk_params = self.cte()
        row = sql.fetchone(
            f"WITH {lk}, done AS ({statement}) "
            "SELECT lk.held, d.* FROM lk LEFT JOIN (SELECT 1 AS found, * FROM done) d ON true",
            [*lk_params, *params],
        )
        assert row is not None  # lk has one row
        self.answered(row[0])
        return tuple(row[2:]) if row[1] else None

    def execute_releasing(self, statement: str, params: list) -> int:
        """Run `statement`, an UPDATE without RETURNING, and give the lock back with it: on
        PostgreSQL in the same statement, after the UPDATE (it reads the UPDATE's count first).
        The number of rows it changed."""
        if not (self.postgres and self.held):
            changed = sql.execute(statement, params)
            self.release()
            return changed
        row = sql.fetchone(
            f"WITH done AS ({statement} RETURNING 1) "
            "SELECT d.n, pg_advisory_unlock(%s) FROM (SELECT count(*) AS n FROM done) d",
            [*params, self.id],
        )
        self.held = False
        return int(row[0]) if row else 0

    def connection_lost(self) -> None:
        """The session that held it was closed: PostgreSQL gave the lock back with it."""
        if self.postgres:
            self.held = self._asked = False

    def release(self) -> None:
        """Give it back if this process holds it (or may: a statement that took it failed)."""
        if not self.postgres:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None
            self.held = False
            return
        if not (self.held or self._asked):
            return
        self.held = self._asked = False
        try:
            sql.fetchone("SELECT pg_advisory_unlock(%s)", [self.id])
        except Exception:  # noqa: BLE001 - a dropped session already released the lock
            connection.close()

    def _flock(self) -> bool:
        folder = Path(settings.DATA_DIR) / "locks"
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / f"{self.id % STRIPES:04d}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self.held = False
            return False
        self._fd = fd
        self.held = True
        return True


@contextmanager
def effect_lock(key: str, *, take: bool = True) -> Iterator[EffectLock]:
    """The lock of `key`, given back on leaving. take=True takes it at once (`held` says
    whether); take=False leaves it to the effect's first statement (`taking`, `claiming`)."""
    lock = EffectLock(key)
    try:
        if take:
            lock.take()
        yield lock
    finally:
        lock.release()
