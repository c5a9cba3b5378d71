"""Tables that moved between apps keep their rows."""

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
