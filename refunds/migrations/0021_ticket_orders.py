"""A ticket covers one or more orders: the TicketOrder link, with the "one open ticket per order"
rule moved onto it. Every ticket so far covers its one order: one link each, open while the
ticket is."""

import django.db.models.deletion
from django.db import migrations, models

OPEN = ("new", "running", "awaiting_review", "failed")


def link_every_ticket(apps, schema_editor):
    # One statement, however many tickets there are.
    schema_editor.execute(
        "INSERT INTO refunds_ticketorder (ticket_id, order_id, position, open) "
        "SELECT id, order_id, 0, CASE WHEN status IN (%s, %s, %s, %s) THEN %s ELSE %s END "
        "FROM refunds_ticket",
        [*OPEN, True, False],
    )


class Migration(migrations.Migration):

    dependencies = [
        ('refunds', '0020_email_ticket_optional'),
    ]

    operations = [
        migrations.CreateModel(
            name='TicketOrder',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveSmallIntegerField(default=0)),
                ('open', models.BooleanField(default=True)),
            ],
            options={
                'ordering': ['ticket', 'position'],
            },
        ),
        migrations.RemoveConstraint(
            model_name='ticket',
            name='one_open_ticket_per_order',
        ),
        migrations.AddField(
            model_name='decision',
            name='orders',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='ticketorder',
            name='order',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='links', to='refunds.order'),
        ),
        migrations.AddField(
            model_name='ticketorder',
            name='ticket',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='links', to='refunds.ticket'),
        ),
        migrations.RunPython(link_every_ticket, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='ticketorder',
            constraint=models.UniqueConstraint(fields=('ticket', 'order'), name='ticket_order_once'),
        ),
        migrations.AddConstraint(
            model_name='ticketorder',
            constraint=models.UniqueConstraint(condition=models.Q(('open', True)), fields=('order',), name='one_open_ticket_per_order'),
        ),
    ]
