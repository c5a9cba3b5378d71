"""The audit trail: the ticket page's timeline in words, the audit page's filters, the CSV."""

from __future__ import annotations

import csv
import io

from django.urls import reverse

from refunds import services
from refunds.models import AuditEvent
from tests.conftest import make_order
from tests.reviewing import awaiting_review


def decided(agent, colleague, manager):
    ticket = awaiting_review(make_order("6001", fee_cents=699), opened_by=agent)
    services.review_claim(ticket=ticket, by=colleague)
    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=colleague,
        orders=services.review_answers(ticket, answer="reject", reason="=SUM(A1)"),
        note="seen before",
    )
    return ticket


def test_the_ticket_page_tells_its_story_in_words(client, agent, colleague, manager):
    ticket = decided(agent, colleague, manager)
    client.force_login(manager)
    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert "bea took the review (assigned to them)." in html
    assert "bea rejected the refund; told the customer: “=SUM(A1)”" in html
    assert "Internal note: seen before" in html
    assert "UTC</time>" in html  # labelled with the time zone


def test_times_show_in_the_reviewers_time_zone(client, agent, colleague, manager):
    ticket = decided(agent, colleague, manager)
    client.force_login(manager)
    client.cookies["tz"] = "America/New_York"
    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert "EST</time>" in html and "UTC</time>" not in html
    client.cookies["tz"] = "Not/AZone"
    assert "UTC</time>" in client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()


def test_the_audit_page_filters_by_action_and_person(client, agent, colleague, manager):
    decided(agent, colleague, manager)
    client.force_login(manager)
    page = client.get(reverse("reviews:audit"), {"action": "claim"})
    assert [e.action for e in page.context["events"]] == ["claim"]
    page = client.get(reverse("reviews:audit"), {"actor": "bea"})
    assert {e.action for e in page.context["events"]} == {"claim", "reject"}
    page = client.get(reverse("reviews:audit"), {"actor": "nobody"})
    assert "Nothing recorded matches" in page.content.decode()


def test_the_csv_export_holds_the_filtered_events_safe_for_a_spreadsheet(
    client, agent, colleague, manager
):
    decided(agent, colleague, manager)
    client.force_login(manager)
    response = client.get(reverse("reviews:audit_export"), {"action": "reject"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == [
        "at_utc", "ticket", "order", "action", "who", "amount", "answer", "reason", "note"
    ]  # fmt: skip
    assert len(rows) == 2
    assert rows[1][2:7] == ["6001", "Rejected", "bea", "$6.99", "reject"]
    assert rows[1][7:] == ["'=SUM(A1)", "seen before"]  # a formula stays text
    assert AuditEvent.objects.count() == 2


def test_a_user_name_or_order_number_that_reads_as_a_formula_stays_text(
    client, agent, colleague, manager
):
    colleague.username = "@SUM(1+1)"  # Django's user names allow @ + - . _
    colleague.save()
    ticket = decided(agent, colleague, manager)
    ticket.order.number = "-2+3"
    ticket.order.save()
    client.force_login(manager)
    response = client.get(reverse("reviews:audit_export"), {"action": "reject"})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[1][2] == "'-2+3" and rows[1][4] == "'@SUM(1+1)"


def test_an_answer_per_order_whose_order_number_reads_as_a_formula_stays_text(
    transactional_db, client, manager, monkeypatch
):
    """The answer cell of a ticket of several orders starts with an order number, the shop's
    text: "-2+3 approve; …" would be a formula to a spreadsheet."""
    from refunds import enqueue
    from tests.test_desk_several import decide, several

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)
    # First in the ticket and first in PostgreSQL's jsonb too (shorter keys, then bytes).
    ticket = several(("-2+3", 4, 699), ("1044", 3, 1250))
    decide(ticket, manager)
    client.force_login(manager)
    response = client.get(reverse("reviews:audit_export"), {"ticket": ticket.pk})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    (answered,) = [row for row in rows[1:] if row[3] == "Approved"]
    assert answered[6] == "'-2+3 approve; 1044 approve"
