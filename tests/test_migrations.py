"""Tables that moved between apps keep their rows."""

import io
import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("refunds", "0012_order_case_insensitive_indexes"), ("api", None)]
AFTER = [("refunds", "0013_api_tables_move_to_api_app"), ("api", "0002_tables_renamed")]


@pytest.mark.django_db(transaction=True)
def test_the_api_app_takes_over_tokens_counters_and_kept_responses_with_their_rows():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE[:1]).apps
    user = old.get_model("auth", "User").objects.create(username="integrator")
    old.get_model("refunds", "ApiToken").objects.create(user=user, key_hash="h" * 64, hint="rdk_x")
    old.get_model("refunds", "RateCounter").objects.create(key="ip:1", window_start=1, expires=2)
    old.get_model("refunds", "IdempotentRequest").objects.create(
        user=user, key="k1", request_hash="d" * 64, status_code=201, response={"id": 7}
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps

    assert new.get_model("api", "ApiToken").objects.get().hint == "rdk_x"
    assert new.get_model("api", "RateCounter").objects.get().key == "ip:1"
    assert new.get_model("api", "IdempotentRequest").objects.get().response == {"id": 7}
    assert "api_apitoken" in connection.introspection.table_names()
    assert "refunds_apitoken" not in connection.introspection.table_names()

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    # Back to 0012 and forward again rebuilds refunds_ticket on SQLite after webhooks 0002 made
    # its triggers: webhooks 0006 makes them again, or no status change would become an event.
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            triggers = {row[0] for row in cursor.fetchall()}
        assert {"webhooks_ticket_status_changed", "webhooks_refund_state_changed"} <= triggers


@pytest.mark.django_db(transaction=True)
def test_emails_kept_before_the_sender_joined_their_key_are_found_again_by_a_redelivery():
    before = [("intake", "0006_inbound_attachments_and_signature_tokens")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Message = old.get_model("intake", "Message")
    fields = {"subject": "Late", "body": "late", "received_at": "2026-12-01T09:00:00Z"}
    Message.objects.create(
        channel="email", key="email:<a1@mail>", sender="Ana@Example.com", thread_id="i-1", **fields
    )
    Message.objects.create(
        channel="api", key="api:<a1@mail>", sender="ana@example.com", thread_id="i-2", **fields
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    from intake.services import _channel_key

    keys = set(Message.objects.values_list("key", flat=True))
    assert keys == {_channel_key("email", "<a1@mail> from ana@example.com"), "api:<a1@mail>"}


LINK_BEFORE = [("intake", "0010_message_ticket_link")]
LINK_AFTER = [("intake", "0011_message_ticket_link_from_audit")]


@pytest.mark.django_db(transaction=True)
def test_where_messages_went_is_carried_from_the_audit_log_and_sorting_to_their_links():
    executor = MigrationExecutor(connection)
    executor.migrate(LINK_BEFORE)
    old = executor.loader.project_state(LINK_BEFORE).apps
    Order = old.get_model("refunds", "Order")
    Ticket = old.get_model("refunds", "Ticket")
    Message = old.get_model("intake", "Message")
    now = "2026-01-05T10:00:00+00:00"

    def order(number):
        return Order.objects.create(
            number=number,
            customer_email="ana@example.com",
            customer_name="Ana",
            shipping_fee_cents=800,
            promised_on="2026-01-01",
            delivered_on="2026-01-04",
        )

    def ticket(o, thread):
        t = Ticket.objects.create(order=o, thread_id=thread)
        old.get_model("refunds", "TicketOrder").objects.create(ticket=t, order=o)
        return t

    def message(n):
        return Message.objects.create(
            key=f"k{n}", channel="api", sender="ana@example.com", received_at=now, thread_id=f"m{n}"
        )

    one, two, three = order("1042"), order("1044"), order("1047")
    opened, added, sorted_, misread = (
        ticket(one, "t1"),
        ticket(two, "t2"),
        ticket(three, "t3"),
        ticket(order("1050"), "t4"),
    )
    by_intake, before_orders, by_hand = message(1), message(2), message(3)
    AuditEvent = old.get_model("refunds", "AuditEvent")
    AuditEvent.objects.create(
        ticket=added,
        action="note",
        seen={"message_id": by_intake.pk, "added": True, "orders": ["1044"]},
    )
    AuditEvent.objects.create(
        ticket=opened, action="note", seen={"message_id": by_intake.pk, "orders": ["1042"]}
    )
    AuditEvent.objects.create(
        ticket=opened, action="note", seen={"message_id": before_orders.pk}
    )  # one order
    AuditEvent.objects.create(ticket=opened, action="note", seen={"sorted_message_id": by_hand.pk})
    MessageEvent = old.get_model("intake", "MessageEvent")
    MessageEvent.objects.create(
        message=by_hand, action="sort", answer={"orders": ["1050"], "opened": [misread.pk]}
    )
    MessageEvent.objects.create(message=by_hand, action="send_back", answer={"ticket": misread.pk})
    MessageEvent.objects.create(
        message=by_hand, action="sort", answer={"orders": ["1047"], "opened": [sorted_.pk]}
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(LINK_AFTER)
    new = executor.loader.project_state(LINK_AFTER).apps
    links = new.get_model("intake", "MessageTicket").objects.order_by("message_id", "id")
    assert [(li.message_id, li.ticket_id, li.orders, li.added) for li in links] == [
        (by_intake.pk, added.pk, ["1044"], True),
        (by_intake.pk, opened.pk, ["1042"], False),
        (before_orders.pk, opened.pk, ["1042"], False),
        (by_hand.pk, sorted_.pk, ["1047"], False),
    ]

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


LINES_BEFORE = [("refunds", "0026_decision_sent_back")]
LINES_AFTER = [("refunds", "0027_order_lines")]


@pytest.mark.django_db(transaction=True)
def test_an_existing_order_migrates_with_no_lines_and_no_total():
    executor = MigrationExecutor(connection)
    executor.migrate(LINES_BEFORE)
    old = executor.loader.project_state(LINES_BEFORE).apps
    old.get_model("refunds", "Order").objects.create(
        number="1042",
        customer_name="Ana Souza",
        customer_email="ana@example.com",
        promised_on="2026-11-02",
        delivered_on="2026-11-06",
        shipping_fee_cents=699,
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(LINES_AFTER)
    new = executor.loader.project_state(LINES_AFTER).apps
    order = new.get_model("refunds", "Order").objects.get()

    assert (order.shipping_fee_cents, order.total_cents, order.paid_cents) == (699, None, None)
    assert new.get_model("refunds", "OrderLine").objects.filter(order=order).count() == 0

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


PARTS_BEFORE = [("refunds", "0028_stripe_events")]
PARTS_AFTER = [("refunds", "0029_charge_parts")]


@pytest.mark.django_db(transaction=True)
def test_a_refund_from_before_parts_migrates_as_one_shipping_part():
    """The ledger reads every charge by its parts: one made before them was the shipping fee."""
    executor = MigrationExecutor(connection)
    executor.migrate(PARTS_BEFORE)
    old = executor.loader.project_state(PARTS_BEFORE).apps
    order = old.get_model("refunds", "Order").objects.create(
        number="1042",
        customer_name="Ana Souza",
        customer_email="ana@example.com",
        promised_on="2026-11-02",
        delivered_on="2026-11-06",
        shipping_fee_cents=699,
    )
    ticket = old.get_model("refunds", "Ticket").objects.create(thread_id="refund-1042", order=order)
    old.get_model("refunds", "Charge").objects.create(
        ticket=ticket,
        order=order,
        idempotency_key="refund-1042:charge_card:1042:500",
        amount_cents=500,
        status="succeeded",
        receipt="re_1",
    )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(PARTS_AFTER)
    new = executor.loader.project_state(PARTS_AFTER).apps
    parts = new.get_model("refunds", "ChargePart").objects.values_list(
        "line_id", "quantity", "amount_cents", "restock"
    )
    assert list(parts) == [(None, 0, 500, False)]

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db
def test_the_seeded_canned_replies_are_reworded_beyond_shipping_and_an_edited_one_is_kept():
    """Refunds are parts of an order now: Ben, who asked to change his address, was told "This
    desk handles refunds of shipping fees" walking the demo."""
    from importlib import import_module

    from django.apps import apps

    from refunds.models import CannedReason

    reword = import_module("refunds.migrations.0039_canned_words_beyond_shipping")
    CannedReason.objects.all().delete()
    seeded = [old for old, _ in reword.NOW_SAID]
    for i, text in enumerate(seeded):
        CannedReason.objects.create(title=f"Seeded {i}", text=text)
    CannedReason.objects.create(title="Edited", text=seeded[0] + " Sorry!")

    reword.reword(apps, None)

    texts = dict(CannedReason.objects.values_list("title", "text"))
    assert [texts[f"Seeded {i}"] for i in range(len(seeded))] == [new for _, new in reword.NOW_SAID]
    assert texts["Edited"] == seeded[0] + " Sorry!"
    assert not any("shipping" in text for title, text in texts.items() if title != "Edited")


KEPT_BEFORE = [("api", "0003_idempotency_keys_scoped_by_endpoint")]
KEPT_AFTER = [("api", "0004_kept_answer_as_text")]


@pytest.mark.django_db(transaction=True)
def test_a_kept_answer_is_kept_as_the_same_json_text():
    executor = MigrationExecutor(connection)
    executor.migrate(KEPT_BEFORE)
    old = executor.loader.project_state(KEPT_BEFORE).apps
    user = old.get_model("auth", "User").objects.create(username="shop")
    answer = {"created": 1, "results": [{"line": 1, "order_number": "7401", "reason": "é"}]}
    old.get_model("api", "IdempotentRequest").objects.create(
        user=user, endpoint="POST api:orders", key="k1", request_hash="d" * 64, status_code=200,
        response=answer,
    )  # fmt: skip

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(KEPT_AFTER)
    new = executor.loader.project_state(KEPT_AFTER).apps
    assert json.loads(new.get_model("api", "IdempotentRequest").objects.get().response) == answer

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


PREVIEW_BEFORE = [("intake", "0017_attachment_preview")]


@pytest.mark.django_db(transaction=True)
def test_pictures_kept_before_previews_are_drawn_again_by_their_headers_and_a_bomb_is_not(
    settings, tmp_path
):
    """A photo kept before `preview` existed stays a photo on its ticket; a picture whose
    header says too many pixels, or whose file is gone, becomes a link."""
    from PIL import Image

    from intake.attachments import storage

    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    executor = MigrationExecutor(connection)
    executor.migrate(PREVIEW_BEFORE)
    old = executor.loader.project_state(PREVIEW_BEFORE).apps
    message = old.get_model("intake", "Message").objects.create(
        channel="email", key="email:<p@mail>", sender="ana@example.com", thread_id="i-1",
        subject="Broken", body="photo", received_at="2026-12-01T09:00:00Z",
    )  # fmt: skip
    for name, size in [("small", (4, 3)), ("bomb", (20_000, 20_000)), ("gone", (4, 3))]:
        out = io.BytesIO()
        Image.new("1", size).save(out, "PNG")
        if name != "gone":
            storage().save(name, io.BytesIO(out.getvalue()))
        old.get_model("intake", "Attachment").objects.create(
            message=message, name=name, content_type="image/png", size=len(out.getvalue()),
            sha256=name * 8,
        )  # fmt: skip

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    from intake.models import Attachment

    drawn = dict(Attachment.objects.values_list("name", "preview"))
    assert drawn == {"small": True, "bomb": False, "gone": False}


HOOKS_BEFORE = [("webhooks", "0004_refund_state_trigger"), ("refunds", "0045_question_early_reply")]
HOOKS_AFTER = [("webhooks", "0005_deliveries_join_the_outbox")]


def _migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.mark.django_db(transaction=True)
def test_webhook_deliveries_move_into_the_outbox_with_their_log_and_back():
    old = _migrate(HOOKS_BEFORE)
    order = old.get_model("refunds", "Order").objects.create(
        number="1042",
        customer_name="Ana Souza",
        customer_email="ana@example.com",
        promised_on="2026-11-02",
        delivered_on="2026-11-06",
        shipping_fee_cents=699,
    )
    ticket = old.get_model("refunds", "Ticket").objects.create(thread_id="refund-1042", order=order)
    endpoint = old.get_model("webhooks", "Endpoint").objects.create(url="https://hooks.example/")
    event = old.get_model("webhooks", "Event").objects.create(
        ticket=ticket, to_status="new", created_at="2026-11-07T10:00:00Z"
    )
    Delivery = old.get_model("webhooks", "Delivery")
    done = Delivery.objects.create(
        event=event, endpoint=endpoint, status="delivered", attempts=2, last_status_code=200
    )
    old.get_model("webhooks", "Attempt").objects.create(delivery=done, status_code=500)
    old.get_model("webhooks", "Attempt").objects.create(delivery=done, status_code=200)

    new = _migrate(HOOKS_AFTER)
    row = new.get_model("refunds", "Email").objects.get()
    assert (row.kind, row.key, row.status, row.attempts, row.ticket_id) == (
        "webhook",
        f"webhook:{event.pk}:{endpoint.pk}",
        "sent",
        2,
        ticket.pk,
    )
    log = new.get_model("webhooks", "Attempt").objects.order_by("id")
    assert [(a.delivery_id, a.status_code) for a in log] == [(row.pk, 500), (row.pk, 200)]

    back = _migrate(HOOKS_BEFORE)
    again = back.get_model("webhooks", "Delivery").objects.get()
    assert (again.event_id, again.endpoint_id, again.status, again.attempts) == (
        event.pk,
        endpoint.pk,
        "delivered",
        2,
    )
    assert back.get_model("webhooks", "Attempt").objects.filter(delivery=again).count() == 2
    assert not back.get_model("refunds", "Email").objects.exists()

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
