# The seeded canned replies spoke of shipping fees alone (0010, 0032); since refunds are parts of
# an order (0029), they say "refund" and "order". A text an admin edited is left as it is.

from django.db import migrations

NOW_SAID = [
    (
        "The shipping fee of this order was already refunded.",
        "This order was already refunded.",
    ),
    (
        "This order's shipping is not eligible for a refund.",
        "This order is not eligible for a refund.",
    ),
    (
        "Thank you for your message. This desk handles refunds of shipping fees, so we cannot "
        "change an address or an order from here. Please contact our customer service through "
        "the shop's website, and they will help you.",
        "Thank you for your message. This desk handles refunds, so we cannot change an address "
        "or an order from here. Please contact our customer service through the shop's website, "
        "and they will help you.",
    ),
]


def reword(apps, schema_editor):
    CannedReason = apps.get_model("refunds", "CannedReason")
    for seeded, said in NOW_SAID:
        CannedReason.objects.filter(text=seeded).update(text=said)


def back(apps, schema_editor):
    CannedReason = apps.get_model("refunds", "CannedReason")
    for seeded, said in NOW_SAID:
        CannedReason.objects.filter(text=said).update(text=seeded)


class Migration(migrations.Migration):

    dependencies = [
        ("refunds", "0038_ticket_reason_refund_status"),
    ]

    operations = [migrations.RunPython(reword, back)]
