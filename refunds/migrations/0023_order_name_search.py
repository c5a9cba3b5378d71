"""A search by part of a customer's name that does not read every order: a trigram GIN index on
PostgreSQL, an FTS5 trigram table kept in step by triggers on SQLite (refunds/selectors.py).

Neither is in the models' state: a GIN index in Order.Meta would be created on SQLite too, and
a table SQLite rebuilds (an altered column) would lose the triggers. tests/test_query_plans.py
checks that the search uses them and that the SQLite table follows inserts, renames and deletes.
"""

from django.db import migrations

POSTGRES = (
    [
        # What django.contrib.postgres's TrigramExtension does; that operation is no no-op on
        # SQLite when migrating backwards (it reads pg_extension). Kept when unapplied.
        "CREATE EXTENSION IF NOT EXISTS pg_trgm",
        # The expression is the one Django's icontains compares: UPPER("customer_name"::text).
        "CREATE INDEX order_name_trgm_idx ON refunds_order "
        "USING gin ((UPPER(customer_name::text)) gin_trgm_ops)",
    ],
    ["DROP INDEX IF EXISTS order_name_trgm_idx"],
)

SQLITE_TABLE = "refunds_order_name"
SQLITE = (
    [
        # External content: the names stay in refunds_order, the table holds only trigrams.
        f"CREATE VIRTUAL TABLE {SQLITE_TABLE} USING fts5(customer_name, "
        "content='refunds_order', content_rowid='id', tokenize='trigram')",
        f"INSERT INTO {SQLITE_TABLE}({SQLITE_TABLE}) VALUES ('rebuild')",
        f"CREATE TRIGGER {SQLITE_TABLE}_insert AFTER INSERT ON refunds_order BEGIN "
        f"INSERT INTO {SQLITE_TABLE}(rowid, customer_name) VALUES (new.id, new.customer_name); "
        "END",
        f"CREATE TRIGGER {SQLITE_TABLE}_delete AFTER DELETE ON refunds_order BEGIN "
        f"INSERT INTO {SQLITE_TABLE}({SQLITE_TABLE}, rowid, customer_name) "
        "VALUES ('delete', old.id, old.customer_name); END",
        f"CREATE TRIGGER {SQLITE_TABLE}_update AFTER UPDATE OF customer_name ON refunds_order "
        f"BEGIN INSERT INTO {SQLITE_TABLE}({SQLITE_TABLE}, rowid, customer_name) "
        "VALUES ('delete', old.id, old.customer_name); "
        f"INSERT INTO {SQLITE_TABLE}(rowid, customer_name) VALUES (new.id, new.customer_name); "
        "END",
    ],
    [
        f"DROP TRIGGER IF EXISTS {SQLITE_TABLE}_insert",
        f"DROP TRIGGER IF EXISTS {SQLITE_TABLE}_delete",
        f"DROP TRIGGER IF EXISTS {SQLITE_TABLE}_update",
        f"DROP TABLE IF EXISTS {SQLITE_TABLE}",
    ],
)


def forwards(apps, schema_editor) -> None:
    run(schema_editor, forward=True)


def backwards(apps, schema_editor) -> None:
    run(schema_editor, forward=False)


def run(schema_editor, *, forward: bool) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = POSTGRES[0 if forward else 1]
    elif vendor == "sqlite":
        statements = SQLITE[0 if forward else 1]
    else:
        return
    for statement in statements:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("refunds", "0022_decision_reviewer_recent_idx")]

    operations = [migrations.RunPython(forwards, backwards)]
