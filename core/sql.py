"""The few hot statements of a run are written in SQL (one round trip each, no query building),
the same on SQLite and PostgreSQL; everything else uses the ORM."""

from __future__ import annotations

from typing import Any

from django.db import connection


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def now() -> str:
    """The database's clock, in the form Django stores datetimes (SQLite: text, UTC)."""
    if is_postgres():
        return "now()"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def now_plus() -> str:
    """The database's clock plus %s seconds (one parameter)."""
    if is_postgres():
        return "now() + make_interval(secs => %s)"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || %s || ' seconds')"


def now_minus() -> str:
    """The database's clock minus %s seconds (one parameter)."""
    if is_postgres():
        return "now() - make_interval(secs => %s)"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || %s || ' seconds')"


def fetchone(sql: str, params: list[Any]) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def execute(sql: str, params: list[Any]) -> int:
    """Run a statement; the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def literal(value: str) -> str:
    """A choice's value as SQL text. Only our own choices come here, never input."""
    if "'" in value or "%" in value:
        raise ValueError(f"{value!r} cannot be written into SQL as it is")
    return f"'{value}'"
