"""A decision has one shape: its answer per order (Decision.orders). A one-order decision of
before kept a manager's lower amount beside it; it moves into its order's answer, then the
column goes."""

from django.db import migrations


def lower_amounts_into_orders(apps, schema_editor):
    Decision = apps.get_model("refunds", "Decision")
    lowered = Decision.objects.filter(amount_cents__isnull=False, orders__isnull=True)
    for decision in lowered.select_related("ticket__order"):
        number = decision.ticket.order.number
        decision.orders = {number: {"answer": "approve", "amount_cents": decision.amount_cents}}
        decision.save(update_fields=["orders"])


class Migration(migrations.Migration):
    dependencies = [
        ("refunds", "0042_reconcile_runs"),
    ]

    operations = [
        migrations.RunPython(lower_amounts_into_orders, migrations.RunPython.noop),
        migrations.RemoveField(model_name="decision", name="amount_cents"),
    ]
