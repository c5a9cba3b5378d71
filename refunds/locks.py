"""A lock held across one effect (a gateway call, an SMTP conversation) for its key.

The lease epoch fences every write, but a process paused *between* its last check and the call
itself (SIGSTOP, a long GC pause) would still make the call when it wakes. This lock closes that
gap: the process holds it from its claim until the effect is recorded, a paused process keeps
holding it, and a successor that finds it held waits (EffectBusy) instead of acting twice. A
process that dies releases it: the kernel drops a file lock, PostgreSQL drops an advisory lock
with the session.

- SQLite (one machine): `flock` on one of 1,024 lock files in the data folder, by key hash.
- PostgreSQL (many machines): `pg_try_advisory_lock` on the worker's own connection, taken and
  given back by statements of their own, outside any transaction. Folded into the effect's own
  statements (a MATERIALIZED CTE) it saved about 5 round trips, ~1.7 ms of a ~25 ms advance,
  less than a loaded machine's swing between two rounds (bench/alternate.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

from core import sql

STRIPES = 1024


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True)


class EffectLock:
    """The lock of one effect's key, as `effect_lock()` hands it out; `held` says whether this
    process holds it."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.id = _hash(key)
        self.postgres = connection.vendor == "postgresql"
        self.held = False
        self._fd: int | None = None

    def take(self) -> bool:
        if not self.postgres:
            return self._flock()
        row = sql.fetchone("SELECT pg_try_advisory_lock(%s)", [self.id])
        self.held = bool(row and row[0])
        return self.held

    def connection_lost(self) -> None:
        """The session that held it was closed: PostgreSQL gave the lock back with it."""
        if self.postgres:
            self.held = False

    def release(self) -> None:
        """Give it back if this process holds it."""
        if not self.postgres:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None
            self.held = False
            return
        if not self.held:
            return
        self.held = False
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
def effect_lock(key: str) -> Iterator[EffectLock]:
    """The lock of `key`, taken at once (`held` says whether) and given back on leaving."""
    lock = EffectLock(key)
    try:
        lock.take()
        yield lock
    finally:
        lock.release()
