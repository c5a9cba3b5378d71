"""The desk's change clock: Ticket.card_version, written by triggers alone.

Every transaction that changes what a ticket's queue card shows (CARD_COLUMNS, or a decision on
the ticket) gives the ticket a card_version above every other, whichever code path wrote it (raw
SQL in refunds/lease.py, the services, the admin). The review queue's poll reads the max
(reviews/views/queue.py): one index read says whether anything changed since the client's last
poll, and each card's own version says which. A write of an older card_version (a stale copy's
save()) is raised to a new one, so a card's version never goes back.

PostgreSQL takes the numbers from a sequence at commit, in commit order (below). SQLite has one
writer at a time and no sequences: a one-row table counts, at the write. The column may be NULL
(rows older than this, and a copy made in Python before its first refresh) so that SQLite adds
it without rebuilding refunds_ticket, which would lose the other migrations' triggers."""

from django.conf import settings
from django.db import migrations, models

# What a queue card shows of its ticket's row (reviews/rows.py keys a kept card on all of it).
CARD_COLUMNS = [
    "status",
    "pending_interrupt_id",
    "pending_payload",
    "required_role",
    "amount_cents",
    "claimed_by_id",
    "claim_expires_at",
    "escalated_for",
    "escalation_note",
    "review_since",
    "opened_by_id",
    "reason",
    "reading",
    "order_id",
]
_NEXT = """
    UPDATE refunds_card_clock SET n = n + 1;
    UPDATE refunds_ticket SET card_version = (SELECT n FROM refunds_card_clock) WHERE id = {id};
END"""
_CHANGED = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in CARD_COLUMNS)
SQLITE = [
    "CREATE TABLE refunds_card_clock (n INTEGER NOT NULL)",
    "INSERT INTO refunds_card_clock (n) SELECT coalesce(max(card_version), 0) FROM refunds_ticket",
    "CREATE TRIGGER refunds_card_opened AFTER INSERT ON refunds_ticket FOR EACH ROW BEGIN"
    + _NEXT.format(id="NEW.id"),
    "CREATE TRIGGER refunds_card_moved AFTER UPDATE ON refunds_ticket FOR EACH ROW"
    + f" WHEN {_CHANGED} OR coalesce(NEW.card_version, 0) < coalesce(OLD.card_version, 0) BEGIN"
    + _NEXT.format(id="NEW.id"),
    "CREATE TRIGGER refunds_card_decided AFTER INSERT ON refunds_decision FOR EACH ROW BEGIN"
    + _NEXT.format(id="NEW.ticket_id"),
    "CREATE TRIGGER refunds_card_redecided AFTER UPDATE ON refunds_decision FOR EACH ROW BEGIN"
    + _NEXT.format(id="NEW.ticket_id"),
    "CREATE TRIGGER refunds_card_undecided AFTER DELETE ON refunds_decision FOR EACH ROW BEGIN"
    + _NEXT.format(id="OLD.ticket_id"),
]
SQLITE_DROP = [
    *(
        f"DROP TRIGGER IF EXISTS refunds_card_{name}"
        for name in ("opened", "moved", "decided", "redecided", "undecided")
    ),
    "DROP TABLE IF EXISTS refunds_card_clock",
]
_OLD = ", ".join(f"OLD.{c}" for c in CARD_COLUMNS)
_NEW = ", ".join(f"NEW.{c}" for c in CARD_COLUMNS)
# On PostgreSQL a version is taken at commit, under one advisory lock held until the commit
# ends, so versions are visible in the order they were taken: a reader that saw version N has
# seen every card below it. (Taken at the write, a transaction could take N - 1 and commit after
# a reader saw N.) Constraint triggers, deferred to the commit, take it; tests/conftest.py makes
# them fire at each statement inside the test transactions that never commit.
_COMMITTED = """
    CREATE FUNCTION refunds_card_committed() RETURNS trigger AS $$
    DECLARE
        ticket bigint;
    BEGIN
        IF TG_TABLE_NAME = 'refunds_ticket' THEN
            ticket := NEW.id;
        ELSIF TG_OP = 'DELETE' THEN
            ticket := OLD.ticket_id;
        ELSE
            ticket := NEW.ticket_id;
        END IF;
        PERFORM pg_advisory_xact_lock(hashtext('refunds_card_version'));
        UPDATE refunds_ticket SET card_version = nextval('refunds_card_version_seq')
        WHERE id = ticket;
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql
"""
POSTGRES = [
    "CREATE SEQUENCE refunds_card_version_seq",
    "SELECT setval('refunds_card_version_seq', coalesce(max(card_version), 0) + 1, false) "
    "FROM refunds_ticket",
    # A stale copy's save() writes an older version: the row keeps its own.
    """
    CREATE FUNCTION refunds_card_kept() RETURNS trigger AS $$
    BEGIN
        IF coalesce(NEW.card_version, 0) < coalesce(OLD.card_version, 0) THEN
            NEW.card_version := OLD.card_version;
        END IF;
        RETURN NEW;
    END
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER refunds_card_kept BEFORE UPDATE ON refunds_ticket
    FOR EACH ROW EXECUTE FUNCTION refunds_card_kept()
    """,
    _COMMITTED,
    """
    CREATE CONSTRAINT TRIGGER refunds_card_opened AFTER INSERT ON refunds_ticket
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refunds_card_committed()
    """,
    f"""
    CREATE CONSTRAINT TRIGGER refunds_card_moved AFTER UPDATE ON refunds_ticket
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (({_OLD}) IS DISTINCT FROM ({_NEW}))
    EXECUTE FUNCTION refunds_card_committed()
    """,
    """
    CREATE CONSTRAINT TRIGGER refunds_card_decided AFTER INSERT OR UPDATE OR DELETE
    ON refunds_decision DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION refunds_card_committed()
    """,
]
# What tests/conftest.py sets IMMEDIATE in a test's transaction.
POSTGRES_AT_COMMIT = ["refunds_card_opened", "refunds_card_moved", "refunds_card_decided"]
POSTGRES_DROP = [
    "DROP TRIGGER IF EXISTS refunds_card_decided ON refunds_decision",
    "DROP TRIGGER IF EXISTS refunds_card_moved ON refunds_ticket",
    "DROP TRIGGER IF EXISTS refunds_card_opened ON refunds_ticket",
    "DROP FUNCTION IF EXISTS refunds_card_committed()",
    "DROP TRIGGER IF EXISTS refunds_card_kept ON refunds_ticket",
    "DROP FUNCTION IF EXISTS refunds_card_kept()",
    "DROP SEQUENCE IF EXISTS refunds_card_version_seq",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        for sql in statements_by_vendor.get(vendor, []):
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0046_outbox_of_two_kinds"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(model_name="ticket", name="ticket_queue_cover_idx"),
        migrations.AddField(
            model_name="ticket",
            name="card_version",
            field=models.BigIntegerField(editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                fields=[
                    "status",
                    "review_since",
                    "id",
                    "required_role",
                    "opened_by",
                    "escalated_for",
                    "pending_interrupt_id",
                    "claimed_by",
                    "claim_expires_at",
                    "card_version",
                ],
                name="ticket_queue_cover_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(fields=["card_version"], name="ticket_card_version_idx"),
        ),
        migrations.RunPython(
            _run({"sqlite": SQLITE, "postgresql": POSTGRES}),
            _run({"sqlite": SQLITE_DROP, "postgresql": POSTGRES_DROP}),
        ),
    ]
