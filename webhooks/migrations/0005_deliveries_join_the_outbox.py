"""Webhook deliveries become rows of the one outbox (refunds_email, kind "webhook"), and their
attempts' log points at those rows. Reversible: going back copies the rows into a delivery table
again, with their log."""

import django.db.models.deletion
from django.db import migrations, models

# What each status of a delivery is called in the outbox, and back.
TO_OUTBOX = {"pending": "pending", "sending": "sending", "delivered": "sent", "failed": "failed"}
FROM_OUTBOX = {new: old for old, new in TO_OUTBOX.items()}
CARRIED = ["attempts", "next_attempt_at", "claimed_by", "claimed_at", "last_status_code"]


def into_the_outbox(apps, schema_editor):
    Delivery = apps.get_model("webhooks", "Delivery")
    Attempt = apps.get_model("webhooks", "Attempt")
    Email = apps.get_model("refunds", "Email")
    for old in Delivery.objects.select_related("event").order_by("id"):
        row = Email.objects.create(
            kind="webhook",
            key=f"webhook:{old.event_id}:{old.endpoint_id}",
            ticket_id=old.event.ticket_id,
            event_id=old.event_id,
            endpoint_id=old.endpoint_id,
            status=TO_OUTBOX[old.status],
            sent_at=old.delivered_at,
            last_error=old.last_error,
            **{name: getattr(old, name) for name in CARRIED},
        )
        Email.objects.filter(pk=row.pk).update(created_at=old.created_at)  # auto_now_add
        Attempt.objects.filter(delivery_id=old.pk).update(outgoing_id=row.pk)
    checked_now(schema_editor)


def out_of_the_outbox(apps, schema_editor):
    Delivery = apps.get_model("webhooks", "Delivery")
    Attempt = apps.get_model("webhooks", "Attempt")
    Email = apps.get_model("refunds", "Email")
    for row in Email.objects.filter(kind="webhook").order_by("id"):
        old = Delivery.objects.create(
            event_id=row.event_id,
            endpoint_id=row.endpoint_id,
            status=FROM_OUTBOX[row.status],
            delivered_at=row.sent_at,
            last_error=row.last_error,
            **{name: getattr(row, name) for name in CARRIED},
        )
        Delivery.objects.filter(pk=old.pk).update(
            created_at=row.created_at, next_attempt_at=row.next_attempt_at or row.created_at
        )
        Attempt.objects.filter(outgoing_id=row.pk).update(delivery_id=old.pk, outgoing_id=None)
    Email.objects.filter(kind="webhook").delete()
    checked_now(schema_editor)


def checked_now(schema_editor):
    """PostgreSQL alters no table with foreign key checks still deferred in the transaction."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0004_refund_state_trigger"),
        ("refunds", "0046_outbox_of_two_kinds"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="outgoing",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="refunds.email",
            ),
        ),
        migrations.AlterField(
            model_name="attempt",
            name="delivery",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="log",
                to="webhooks.delivery",
            ),
        ),
        migrations.RunPython(into_the_outbox, out_of_the_outbox),
        migrations.RemoveField(model_name="attempt", name="delivery"),
        migrations.DeleteModel(name="Delivery"),
        migrations.CreateModel(
            name="Delivery",
            fields=[],
            options={"verbose_name_plural": "deliveries", "ordering": ["-id"], "proxy": True},
            bases=("refunds.email",),
        ),
        migrations.RenameField(model_name="attempt", old_name="outgoing", new_name="delivery"),
        migrations.AlterField(
            model_name="attempt",
            name="delivery",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="log",
                to="webhooks.delivery",
            ),
        ),
    ]
