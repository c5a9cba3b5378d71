"""A trigger on refunds_charge writes a webhooks_event row when what the processor says of a
refunded ticket's refund changes (pending, succeeded, failed: refunds/selectors.py words it), in
the same transaction as the change, whichever code path wrote it (the ledger's settle, Stripe's
events), as migration 0002 does for a ticket's status. The row's from_status and to_status are
both the ticket's ("refunded"): webhooks/delivery.py sends it as "ticket.refund_state_changed".

SQLite loses a table's triggers when a migration rebuilds the table: a later migration that alters
refunds_charge there must make this one again (tests/test_webhooks.py checks it exists)."""

from django.db import migrations

SQLITE = [
    """
    CREATE TRIGGER webhooks_refund_state_changed AFTER UPDATE OF processor_status
    ON refunds_charge
    FOR EACH ROW WHEN OLD.processor_status IS NOT NEW.processor_status
        AND NEW.status = 'succeeded' BEGIN
        INSERT INTO webhooks_event
            (ticket_id, from_status, to_status, amount_cents, required_role, created_at, fanned_out)
        SELECT t.id, t.status, t.status, t.amount_cents, t.required_role,
               strftime('%Y-%m-%d %H:%M:%f', 'now'), 0
        FROM refunds_ticket t WHERE t.id = NEW.ticket_id AND t.status = 'refunded';
    END
    """,
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS webhooks_refund_state_changed"]
POSTGRES = [
    """
    CREATE OR REPLACE FUNCTION webhooks_refund_state_event() RETURNS trigger AS $$
    BEGIN
        IF OLD.processor_status IS DISTINCT FROM NEW.processor_status
           AND NEW.status = 'succeeded' THEN
            INSERT INTO webhooks_event
                (ticket_id, from_status, to_status, amount_cents, required_role, created_at,
                 fanned_out)
            SELECT t.id, t.status, t.status, t.amount_cents, t.required_role, clock_timestamp(),
                   false
            FROM refunds_ticket t WHERE t.id = NEW.ticket_id AND t.status = 'refunded';
        END IF;
        RETURN NEW;
    END
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER webhooks_refund_state_event AFTER UPDATE OF processor_status
    ON refunds_charge FOR EACH ROW EXECUTE FUNCTION webhooks_refund_state_event()
    """,
]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS webhooks_refund_state_event ON refunds_charge",
    "DROP FUNCTION IF EXISTS webhooks_refund_state_event()",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for sql in statements_by_vendor[schema_editor.connection.vendor]:
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0003_endpoint_url_public_https_only"),
        ("refunds", "0035_audit_action_refund_failed_beside_answer"),
    ]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE, "postgresql": POSTGRES}),
            _run({"sqlite": SQLITE_DROP, "postgresql": POSTGRES_DROP}),
        ),
    ]
