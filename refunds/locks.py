"""A lock held across one effect (a gateway call, an SMTP conversation) for its key.

The lease epoch fences every write, but a process paused *between* its last check and the call
itself (SIGSTOP, a long GC pause) would still make the call when it wakes. This lock closes that
gap: the process holds it from its claim until the effect is recorded, a paused process keeps
holding it, and a successor that finds it held waits (EffectBusy) instead of acting twice. A
process that dies releases it: the kernel drops a file lock, PostgreSQL drops an advisory lock
with the session.

- SQLite (one machine): `flock` on one of 1,024 lock files in the data folder, by key hash.
- PostgreSQL (many machines): `pg_try_advisory_lock` on the worker's own connection.
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

STRIPES = 1024


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True)


@contextmanager
def effect_lock(key: str) -> Iterator[bool]:
    """Yield True with the lock held, or False at once if another process holds it."""
    if connection.vendor == "postgresql":
        with _advisory(key) as held:
            yield held
    else:
        with _flock(key) as held:
            yield held


@contextmanager
def _flock(key: str) -> Iterator[bool]:
    folder = Path(settings.DATA_DIR) / "locks"
    folder.mkdir(exist_ok=True)
    path = folder / f"{_hash(key) % STRIPES:04d}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _advisory(key: str) -> Iterator[bool]:
    lock_id = _hash(key)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [lock_id])
        held = cursor.fetchone()[0]
    if not held:
        yield False
        return
    try:
        yield True
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_id])
        except Exception:  # noqa: BLE001 - a dropped session already released the lock
            connection.close()
