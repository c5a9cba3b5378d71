"""Django admin: admins browse threads, link to their history, retry failed ones, edit nothing."""

import pytest
from django.urls import reverse

from refunds import enqueue, runner, services
from refunds.models import Ticket


@pytest.fixture
def refunded(transactional_db, agent, late_order) -> Ticket:
    ticket = services.ticket_open(order_number="1042")
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(ticket, answer="approve"),
    )
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    return ticket


def test_an_admins_ticket_page_links_the_threads_history_and_keeps_its_charge(
    client, admin_user, refunded
):
    client.force_login(admin_user)
    response = client.get(reverse("admin:refunds_ticket_change", args=[refunded.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert reverse("ops:history", args=[refunded.pk]) in html
    assert "Fork with a corrected amount" not in html  # money moved
    assert f"{refunded.thread_id}:charge_card" in html  # the charge's idempotency key


def test_the_mirror_and_the_ledger_cannot_be_edited_by_hand(client, admin_user, refunded):
    client.force_login(admin_user)
    change = reverse("admin:refunds_ticket_change", args=[refunded.pk])
    response = client.post(change, {"note": "edited", "order": refunded.order_id})
    assert response.status_code == 403
    refunded.refresh_from_db()
    assert refunded.note != "edited"
    charge = refunded.charges.get()
    assert (
        client.post(
            reverse("admin:refunds_charge_delete", args=[charge.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert client.get(reverse("admin:refunds_decision_add")).status_code == 403


def test_an_admin_puts_a_failed_ticket_back_in_line(
    client, admin_user, transactional_db, late_order, monkeypatch
):
    woken = []
    monkeypatch.setattr(enqueue, "wake", woken.append)
    ticket = services.ticket_open(order_number="1042")
    Ticket.objects.filter(pk=ticket.pk).update(status="failed", attempts=6, last_error="boom")
    client.force_login(admin_user)
    response = client.post(
        reverse("admin:refunds_ticket_changelist"),
        {"action": "retry_failed", "_selected_action": [ticket.pk]},
        follow=True,
    )
    assert "Put 1 ticket(s) back in line." in response.content.decode()
    ticket.refresh_from_db()
    assert ticket.status == "running" and ticket.attempts == 0
    assert woken[-1] == ticket.pk


def test_admin_lists_amounts_in_dollars_and_keeps_canned_reasons(client, admin_user, big_order):
    from tests.reviewing import awaiting_review

    awaiting_review(big_order)
    client.force_login(admin_user)
    for name in ("admin:refunds_order_changelist", "admin:refunds_ticket_changelist"):
        html = client.get(reverse(name)).content.decode()
        assert "$48.00" in html and ">4800<" not in html, name
    response = client.post(
        reverse("admin:refunds_cannedreason_add"),
        {
            "title": "Voucher",
            "text": "We sent you a voucher instead.",
            "active": "on",
            "position": 0,
            "use": "reject",  # a reply for rejecting (not one for setting a message aside)
            "texts-TOTAL_FORMS": "0",  # its texts in other languages (an inline): none
            "texts-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    client.force_login(admin_user)
    assert "Voucher" in client.get("/").content.decode()  # offered in the queue's rows


def test_the_emails_list_keeps_to_five_columns(client, admin_user, refunded):
    client.force_login(admin_user)
    html = client.get(reverse("admin:refunds_email_changelist")).content.decode()
    head = html.split("<thead>")[1].split("</thead>")[0]
    columns = head.count('<th scope="col"') - head.count('class="action-checkbox-column"')
    assert columns == 5, head
    assert "Your refund for order 1042" in html
