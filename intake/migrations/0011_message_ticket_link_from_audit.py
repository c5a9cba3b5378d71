"""Where each message went, from the records kept so far: the intake's audit entries (seen
"message_id", with the orders and "added"; an entry from before tickets of several orders names
none: its ticket's order), then each person's sorting and sending back (MessageEvent), in order."""

from django.db import migrations


def link_from_records(apps, schema_editor):
    AuditEvent = apps.get_model("refunds", "AuditEvent")
    Message = apps.get_model("intake", "Message")
    MessageEvent = apps.get_model("intake", "MessageEvent")
    MessageTicket = apps.get_model("intake", "MessageTicket")
    TicketOrder = apps.get_model("refunds", "TicketOrder")
    links: dict[tuple[int, int], dict] = {}  # (message, ticket) -> its link, in order
    entries = (
        AuditEvent.objects.filter(seen__has_key="message_id")
        .select_related("ticket__order")
        .order_by("id")
    )
    for e in entries.iterator():
        links[(e.seen["message_id"], e.ticket_id)] = {
            "orders": list(e.seen.get("orders") or [e.ticket.order.number]),
            "added": bool(e.seen.get("added")),
        }
    actions = MessageEvent.objects.filter(action__in=["sort", "send_back"]).order_by("at", "id")
    for event in actions.iterator():
        if event.action == "send_back":
            links.pop((event.message_id, event.answer.get("ticket")), None)
            continue
        asked = event.answer.get("orders") or []
        for key, added in (("opened", False), ("added", True)):
            for ticket_id in event.answer.get(key) or []:
                covers = TicketOrder.objects.filter(ticket_id=ticket_id).values_list(
                    "order__number", flat=True
                )
                links[(event.message_id, ticket_id)] = {
                    "orders": [n for n in asked if n in set(covers)],
                    "added": added,
                }
    messages = set(Message.objects.filter(pk__in={m for m, _ in links}).values_list("pk", flat=True))
    MessageTicket.objects.bulk_create(
        [
            MessageTicket(message_id=m, ticket_id=t, **link)
            for (m, t), link in links.items()
            if m in messages
        ],
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("intake", "0010_message_ticket_link"),
        ("refunds", "0025_sweep_run"),
    ]

    operations = [migrations.RunPython(link_from_records, migrations.RunPython.noop)]
