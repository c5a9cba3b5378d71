"""The SQLite leg of a request that cannot reach its database: the database file is held by
another writer (a paused worker inside its write transaction) past the busy timeout. The
request answers the 503 page with Retry-After, never 500, and changes nothing. (A dropped
connection on PostgreSQL: test_blip_requests.py.)"""

from __future__ import annotations

import sqlite3

import pytest
from django.conf import settings
from django.db import connection

from refunds.models import AuditEvent, Ticket

pytestmark = pytest.mark.skipif(
    settings.IS_POSTGRES, reason="SQLite's own way of being unreachable: a held write lock"
)


def test_a_page_post_that_cannot_get_the_database_answers_the_503_page_and_changes_nothing(
    client, transactional_db, agent, late_order
):
    client.force_login(agent)
    assert client.get("/tickets/new/").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 200")  # the request gives up in 0.2 s, not 30
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        response = client.post("/tickets/new/", {"order_number": "1042", "note": "late"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert response.status_code == 503
    assert response["Retry-After"] == str(settings.DATABASE_RETRY_AFTER_SECONDS)
    html = response.content.decode()
    assert "Try again in a moment" in html and "Nothing was changed" in html
    assert not Ticket.objects.exists() and not AuditEvent.objects.exists()
    assert client.post("/tickets/new/", {"order_number": "1042", "note": "late"}).status_code == 302
    assert Ticket.objects.count() == 1
