"""Rewrite what the checkpointer and the store hold under the writing key (the first of
REFUNDS_CHECKPOINT_KEYS): rows under an older key, and rows written before keys were set. In
place (same checkpoint ids), in batches, on both backends; a row already under the writing key
is left alone, so a rerun finds nothing to do.

Each row is rewritten with a compare-and-set on its old bytes: a thread that wrote the row in
between (under the writing key already) keeps its write."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from psycopg.types.json import Jsonb

from refunds import persistence
from refunds.persistence.encryption import is_current, seal, unseal


@dataclass(frozen=True)
class Table:
    name: str
    keys: tuple[str, ...]
    data: str  # the bytes column beside `type`


SQLITE_TABLES = (
    Table("checkpoints", ("thread_id", "checkpoint_ns", "checkpoint_id"), "checkpoint"),
    Table("writes", ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"), "value"),
)
PG_TABLES = (
    Table("checkpoint_blobs", ("thread_id", "checkpoint_ns", "channel", "version"), "blob"),
    Table(
        "checkpoint_writes",
        ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
        "blob",
    ),
)


def reencrypt_all(*, batch: int = 500, say: Callable[[str], None] = print) -> dict[str, int]:
    """Rows rewritten per table."""
    saver = persistence.checkpointer()
    serde = saver.serde
    if not isinstance(serde, EncryptedSerializer):
        raise RuntimeError("REFUNDS_CHECKPOINT_KEYS is empty: there is no key to encrypt under")
    db = _Sqlite(saver) if isinstance(saver, persistence.FencedSqliteSaver) else _Postgres(saver)
    counts: dict[str, int] = {}
    if isinstance(db, _Postgres):
        counts["checkpoints"] = db.move_inline(serde, batch)
        say(f"checkpoints: {counts['checkpoints']} with values moved out of the JSON")
    for table in SQLITE_TABLES if isinstance(db, _Sqlite) else PG_TABLES:
        counts[table.name] = _typed_rows(db, table, serde, batch)
        say(f"{table.name}: {counts[table.name]} rewritten")
    counts["store"] = _store_rows(db, serde, batch)
    say(f"store: {counts['store']} rewritten")
    return counts


def _recrypt(serde: EncryptedSerializer, type_: str, data: bytes) -> tuple[str, bytes]:
    """The same plaintext bytes under the writing key; never deserialized."""
    if "+" in type_:
        type_, cipher = type_.split("+", 1)
        data = serde.cipher.decrypt(cipher, data)
    cipher, sealed = serde.cipher.encrypt(data)
    return f"{type_}+{cipher}", sealed


def _typed_rows(db: _Db, table: Table, serde: EncryptedSerializer, batch: int) -> int:
    done = 0
    for rows in db.pages(table.name, table.keys, f"type, {table.data}", batch):
        changes = []
        for row in rows:
            *key, type_, data = row
            if type_ is None or type_ == "empty" or is_current(type_, serde):
                continue
            changes.append((*_recrypt(serde, type_, bytes(data)), *key, type_, data))
        where = " AND ".join(f"{k} = %s" for k in table.keys)
        done += db.update(
            f"UPDATE {table.name} SET type = %s, {table.data} = %s "
            f"WHERE {where} AND type = %s AND {table.data} = %s",
            changes,
        )
    return done


def _store_rows(db: _Db, serde: EncryptedSerializer, batch: int) -> int:
    done = 0
    for rows in db.pages("store", ("prefix", "key"), "value", batch):
        changes = []
        for prefix, key, stored in rows:
            value = json.loads(stored) if isinstance(stored, str | bytes) else stored
            if isinstance(value, dict) and is_current(str(value.get("sealed", "")), serde):
                continue
            new = seal(serde, unseal(serde, value))
            changes.append((db.json(new), prefix, key, stored if db.raw_json else db.json(value)))
        done += db.update(
            "UPDATE store SET value = %s WHERE prefix = %s AND key = %s AND value = %s", changes
        )
    return done


class _Db:
    raw_json: bool

    def pages(self, table: str, keys: tuple[str, ...], columns: str, batch: int) -> Iterator[list]:
        """Every row's keys and `columns`, a batch at a time, in key order (keyset paging)."""
        after: tuple | None = None
        order = ", ".join(keys)
        while True:
            where = f"WHERE ({order}) > ({', '.join(['%s'] * len(keys))})" if after else ""
            rows = self.fetch(
                f"SELECT {order}, {columns} FROM {table} {where} ORDER BY {order} LIMIT {batch}",
                after or (),
            )
            if not rows:
                return
            yield rows
            after = tuple(rows[-1][: len(keys)])

    def fetch(self, sql: str, params: tuple) -> list:
        raise NotImplementedError

    def update(self, sql: str, rows: list[tuple]) -> int:
        raise NotImplementedError

    def json(self, value: Any) -> Any:
        raise NotImplementedError


class _Sqlite(_Db):
    raw_json = True  # the store keeps JSON text: compare the very text read

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def fetch(self, sql: str, params: tuple) -> list:
        with self.saver.lock:
            return self.saver.conn.execute(sql.replace("%s", "?"), params).fetchall()

    def update(self, sql: str, rows: list[tuple]) -> int:
        with self.saver.lock:
            cur = self.saver.conn.cursor()
            try:
                done = sum(cur.execute(sql.replace("%s", "?"), row).rowcount for row in rows)
                self.saver.conn.commit()
            except BaseException:
                self.saver.conn.rollback()
                raise
        return done

    def json(self, value: Any) -> Any:
        return json.dumps(value)


class _Postgres(_Db):
    raw_json = False

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def fetch(self, sql: str, params: tuple) -> list:
        with persistence.checkpoint_connection(self.saver.conn) as conn:
            return [tuple(r.values()) for r in conn.execute(sql, params).fetchall()]

    def update(self, sql: str, rows: list[tuple]) -> int:
        done = 0
        with persistence.checkpoint_connection(self.saver.conn) as conn, conn.transaction():
            for row in rows:
                done += conn.execute(sql, row).rowcount
        return done

    def json(self, value: Any) -> Any:
        return Jsonb(value)

    def move_inline(self, serde: EncryptedSerializer, batch: int) -> int:
        """Strings and numbers kept in clear in the checkpoint's JSON (as upstream writes them)
        move to checkpoint_blobs, encrypted, at their version; the JSON keeps only nulls."""
        keys = ("thread_id", "checkpoint_ns", "checkpoint_id")
        moved = 0
        for rows in self.pages("checkpoints", keys, "checkpoint", batch):
            with persistence.checkpoint_connection(self.saver.conn) as conn, conn.transaction():
                for *key, checkpoint in rows:
                    values = checkpoint.get("channel_values") or {}
                    versions = checkpoint.get("channel_versions") or {}
                    out = {k: v for k, v in values.items() if v is not None and k in versions}
                    if not out:
                        continue
                    for channel, value in out.items():
                        conn.execute(
                            "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, "
                            "version, type, blob) VALUES (%s, %s, %s, %s, %s, %s) "
                            "ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING",
                            (key[0], key[1], channel, str(versions[channel]))
                            + serde.dumps_typed(value),
                        )
                    kept = {k: v for k, v in values.items() if k not in out}
                    moved += conn.execute(
                        "UPDATE checkpoints SET checkpoint = %s WHERE thread_id = %s AND "
                        "checkpoint_ns = %s AND checkpoint_id = %s AND checkpoint = %s",
                        (Jsonb({**checkpoint, "channel_values": kept}), *key, Jsonb(checkpoint)),
                    ).rowcount
        return moved
