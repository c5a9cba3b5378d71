"""SQLite drops a table's triggers when a migration rebuilds the table: a database that reached
refunds_ticket's or refunds_charge's later rebuilds by another path than a fresh install (an
upgrade, a migration back and forth) could be left without the events' triggers while 0002 and
0004 are marked applied. This makes both again (PostgreSQL keeps its triggers through ALTER)."""

from importlib import import_module

from django.db import migrations

TICKET = import_module("webhooks.migrations.0002_ticket_status_trigger")
CHARGE = import_module("webhooks.migrations.0004_refund_state_trigger")


def made_again(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for sql in TICKET.SQLITE_DROP + CHARGE.SQLITE_DROP + TICKET.SQLITE + CHARGE.SQLITE:
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0005_deliveries_join_the_outbox"),
        ("refunds", "0046_outbox_of_two_kinds"),
    ]
    operations = [migrations.RunPython(made_again, migrations.RunPython.noop)]
