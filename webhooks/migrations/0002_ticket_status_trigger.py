"""A trigger on refunds_ticket writes a webhooks_event row for every new ticket and every status
change, in the same transaction as the change.

Why a trigger: the status is written in many places, several of them raw SQL on purpose (the
lease grant, the release that writes the mirror in one UPDATE, in refunds/lease.py), plus the
services and the admin. A trigger sees all of them, cannot be forgotten by the next code path, and
commits or rolls back with the change itself: no event for a change that did not happen, no
change without its event."""

from django.db import migrations

SQLITE = [
    """
    CREATE TRIGGER webhooks_ticket_opened AFTER INSERT ON refunds_ticket
    FOR EACH ROW BEGIN
        INSERT INTO webhooks_event
            (ticket_id, from_status, to_status, amount_cents, required_role, created_at, fanned_out)
        VALUES (NEW.id, '', NEW.status, NEW.amount_cents, NEW.required_role,
                strftime('%Y-%m-%d %H:%M:%f', 'now'), 0);
    END
    """,
    """
    CREATE TRIGGER webhooks_ticket_status_changed AFTER UPDATE OF status ON refunds_ticket
    FOR EACH ROW WHEN OLD.status IS NOT NEW.status BEGIN
        INSERT INTO webhooks_event
            (ticket_id, from_status, to_status, amount_cents, required_role, created_at, fanned_out)
        VALUES (NEW.id, OLD.status, NEW.status, NEW.amount_cents, NEW.required_role,
                strftime('%Y-%m-%d %H:%M:%f', 'now'), 0);
    END
    """,
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS webhooks_ticket_opened",
    "DROP TRIGGER IF EXISTS webhooks_ticket_status_changed",
]
POSTGRES = [
    """
    CREATE OR REPLACE FUNCTION webhooks_ticket_status_event() RETURNS trigger AS $$
    BEGIN
        IF TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM NEW.status THEN
            INSERT INTO webhooks_event
                (ticket_id, from_status, to_status, amount_cents, required_role, created_at,
                 fanned_out)
            VALUES (NEW.id, CASE WHEN TG_OP = 'INSERT' THEN '' ELSE OLD.status END, NEW.status,
                    NEW.amount_cents, NEW.required_role, clock_timestamp(), false);
        END IF;
        RETURN NEW;
    END
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER webhooks_ticket_status_event AFTER INSERT OR UPDATE OF status
    ON refunds_ticket FOR EACH ROW EXECUTE FUNCTION webhooks_ticket_status_event()
    """,
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS webhooks_ticket_status_event ON refunds_ticket",
    "DROP FUNCTION IF EXISTS webhooks_ticket_status_event()",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for sql in statements_by_vendor[schema_editor.connection.vendor]:
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0001_initial"),
        ("refunds", "0009_hashed_api_tokens_rate_counters"),
    ]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE, "postgresql": POSTGRES}),
            _run({"sqlite": SQLITE_DROP, "postgresql": POSTGRES_DROP}),
        ),
    ]
