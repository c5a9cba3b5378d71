"""The "Needs sorting" page: what the intake could not place, with what was read; sort a message
into a ticket or mark it not a refund request, with htmx or without; counted in the nav."""

from __future__ import annotations

import pytest
from django.urls import reverse

from intake.models import Message, MessageEvent
from refunds import enqueue, policy
from refunds.models import CannedReason, Email, Ticket
from tests.conftest import make_order
from tests.sorting_messages import a_reading, waiting_message

PAGE = reverse("reviews:needs_sorting")
HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)


def sort_url(message: Message) -> str:
    return reverse("reviews:message_sort", args=[message.pk])


def opening(**extra) -> dict:
    return {"order": ["1042"], "reason": policy.DAMAGED, "open": "1"} | extra


# --- the page ----------------------------------------------------------------------------------
def test_it_lists_messages_that_need_sorting_newest_first_with_what_was_read(client, agent):
    older = waiting_message(subject="Older one", sorting_reason="no order found")
    newer = waiting_message(
        subject="Newer one",
        sorting_reason="order 1042 belongs to another customer",
        reading=a_reading(read_by="anthropic:claude-test"),
    )
    waiting_message(subject="Already placed", status=Message.Status.OPENED)
    client.force_login(agent)
    response = client.get(PAGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.index("Newer one") < html.index("Older one")
    assert "Already placed" not in html
    assert "order 1042 belongs to another customer" in html and "no order found" in html
    assert "Read by anthropic:claude-test" in html and "Read by rules" in html
    assert "<q>the mug arrived in pieces</q>" in html
    assert "The mug arrived broken; Ana asks for her money back." in html
    assert "ana@example.com" in html
    assert [c["m"].pk for c in response.context["cards"]] == [newer.pk, older.pk]


def test_it_shows_the_models_fallback_note_when_the_rules_took_over(client, agent):
    waiting_message(reading=a_reading(fallback="the model timed out after 10 s."))
    client.force_login(agent)
    html = client.get(PAGE).content.decode()
    assert "The model's reading was not used:</strong> the model timed out after 10 s." in html


def test_it_escapes_the_customers_words_and_folds_a_long_body(client, agent):
    waiting_message(subject="<b>hi</b>", body="<script>alert(1)</script>" + "x" * 2000)
    client.force_login(agent)
    html = client.get(PAGE).content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert "&lt;b&gt;hi&lt;/b&gt;" in html
    assert "Show all 2025 characters" in html


def test_it_offers_the_orders_read_and_the_senders_recent_ones(client, agent, late_order):
    make_order("1044", fee_cents=1250)  # Ana's
    make_order("2001", name="Ben Okafor")  # another customer's, not offered
    waiting_message(reading=a_reading(orders=("1042", "7777")))
    client.force_login(agent)
    html = client.get(PAGE).content.decode()
    assert 'name="order" value="1042" checked' in html
    assert 'value="7777"' in html and "no such order in the desk" in html
    assert 'name="order" value="1044">' in html and "the sender's recent order" in html
    assert 'value="2001"' not in html
    assert '<option value="damaged" selected>' in html
    assert 'value="not_refund"' not in html.split('name="reason"')[1].split("</select>")[0]


def test_it_marks_another_customers_order_read_in_the_message(client, agent, late_order):
    make_order("2001", name="Ben Okafor")
    waiting_message(reading=a_reading(orders=("2001",)))
    client.force_login(agent)
    html = client.get(PAGE).content.decode()
    assert "another customer's: ben@example.com" in html
    assert 'name="order" value="2001">' in html  # offered, never ticked for the agent


def test_it_pages_the_list_and_serves_it_alone_to_htmx(client, agent):
    for n in range(25):
        waiting_message(subject=f"Message number {n}")
    client.force_login(agent)
    first = client.get(PAGE)
    assert len(first.context["cards"]) == 20 and first.context["pages"] == 2
    second = client.get(PAGE + "?page=2", headers=HTMX | {"HX-Target": "needs-sorting-list"})
    html = second.content.decode()
    assert html.startswith('<section id="needs-sorting-list"') and "<html" not in html
    assert "Message number 0" in html and "Message number 24" not in html
    assert "HX-Request" in second["Vary"]


@pytest.mark.parametrize("persona", ["agent", "manager", "admin_user"])
def test_every_desk_group_sees_the_page_and_its_count_in_the_nav(db, client, persona, request):
    waiting_message()
    waiting_message()
    client.force_login(request.getfixturevalue(persona))
    html = client.get(reverse("reviews:queue")).content.decode()
    nav = html[html.index('id="nav-needs-sorting"') :]
    assert '<span class="count count-warn">2</span>' in nav[: nav.index("</a>")]
    assert client.get(PAGE).status_code == 200


def test_someone_in_no_desk_group_gets_403_and_no_link(client, django_user_model):
    message = waiting_message()
    nobody = django_user_model.objects.create_user("nobody", password="pw")
    client.force_login(nobody)
    assert client.get(PAGE).status_code == 403
    assert client.post(sort_url(message), opening()).status_code == 403
    assert "nav-needs-sorting" not in client.get(reverse("reviews:tickets")).content.decode()
    assert Message.objects.get().status == Message.Status.NEEDS_SORTING


def test_it_redirects_anonymous_users_to_log_in(client):
    assert client.get(PAGE)["Location"].startswith(reverse("login"))


def test_it_rejects_post_on_the_page_and_get_on_the_action(client, agent):
    message = waiting_message()
    client.force_login(agent)
    assert client.post(PAGE).status_code == 405
    assert client.get(sort_url(message)).status_code == 405


# --- sorting -----------------------------------------------------------------------------------
def test_it_opens_the_ticket_without_javascript(client, agent, late_order):
    message = waiting_message()
    client.force_login(agent)
    response = client.post(sort_url(message), opening(reason=policy.WRONG_ITEM), follow=True)
    ticket = Ticket.objects.get()
    assert ticket.reason == policy.WRONG_ITEM and ticket.reading == message.reading
    assert response.redirect_chain == [(PAGE, 302)]
    assert f"Opened ticket {ticket.pk} for order 1042." in response.content.decode()
    assert "Nothing to sort" in response.content.decode()


def test_it_opens_the_ticket_with_htmx_and_updates_the_nav_count(client, agent, late_order):
    message = waiting_message()
    waiting_message(subject="another")
    client.force_login(agent)
    response = client.post(sort_url(message), opening(order=[], more_orders="#1042"), headers=HTMX)
    html = response.content.decode()
    ticket = Ticket.objects.get()
    assert html.startswith(f'<article class="card message message-done" id="message-{message.pk}"')
    assert reverse("reviews:ticket", args=[ticket.pk]) in html
    assert '<span id="nav-needs-sorting-count" hx-swap-oob="true">' in html
    assert '<span class="count count-warn">1</span>' in html
    assert (
        '<p class="muted small" id="needs-sorting-total" hx-swap-oob="true">1 message to sort.'
        in html
    )
    assert "messagesChanged" in response["HX-Trigger"]


def test_it_sets_a_message_aside_with_a_reply_lists_it_and_undoes_it(client, agent, colleague):
    message = waiting_message(reading=a_reading(policy.NOT_REFUND, ()), subject="New address")
    client.force_login(agent)
    page = client.get(reverse("reviews:needs_sorting")).content.decode()
    assert "Not a refund request…" in page and "Change of address or order details" in page
    reply = CannedReason.objects.setting_aside().get(title="Change of address or order details")
    response = client.post(
        sort_url(message), {"not_refund": "1", "reply_canned": reply.pk}, follow=True
    )
    message.refresh_from_db()
    assert message.status == Message.Status.NOT_REFUND and message.handled_by == agent
    assert "aside as not a refund request; the reply goes to them now." in response.content.decode()
    assert Ticket.objects.count() == 0
    email = Email.objects.get()
    assert email.to == "ana@example.com" and email.subject == "Re: New address"

    # The message page says who set it aside, when, and what the customer was told.
    html = client.get(reverse("reviews:message", args=[message.pk])).content.decode()
    assert "Set aside as not a refund request by <strong>agent</strong> at" in html
    assert "with “Change of address or order details” (being sent)" in html
    # Listed; the agent who set it aside may read it, another agent may not.
    listed = client.get(reverse("reviews:set_aside")).content.decode()
    assert "New address" in listed and "replied with “Change of address" in listed
    client.force_login(colleague)
    assert "New address" not in client.get(reverse("reviews:set_aside")).content.decode()

    client.force_login(agent)
    undo = reverse("reviews:set_aside_undo", args=[message.pk])
    html = client.post(undo, follow=True).content.decode()
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING
    assert "back in Needs sorting. A reply sent when it was set aside stays sent." in html
    assert "a reply was written to ana@example.com; it stays in the outbox." in html
    html = client.post(undo, follow=True).content.decode()
    assert "not set aside any more: it is needs sorting. Nothing was changed." in html
    assert [e.action for e in MessageEvent.objects.order_by("id")] == [
        "not_refund",
        "undo_not_refund",
    ]


def test_no_reply_is_said_with_why(client, agent):
    message = waiting_message(subject="Weekly deals")
    client.force_login(agent)
    client.post(sort_url(message), {"not_refund": "1", "no_reply_why": "A newsletter."})
    html = client.get(reverse("reviews:message", args=[message.pk])).content.decode()
    assert "No reply was sent: A newsletter." in html and not Email.objects.exists()


@pytest.mark.parametrize("htmx", [False, True])
@pytest.mark.parametrize(
    ("post", "error"),
    [
        ({"reason": policy.DAMAGED, "open": "1"}, "Pick at least one order"),
        (opening(order=["9999"]), "There is no order 9999"),
        (opening(reason="bogus"), "Select a valid choice"),
        (opening(reason=""), "Choose the reason the customer asks"),
        (opening(more_orders="1042 " * 100), "at most 400 characters"),
        ({"order": ["1042"], "reason": policy.DAMAGED}, "Choose open the ticket or not a refund"),
        (opening(not_refund="1"), "not both"),
        ({"not_refund": "1"}, "pick a reply, write your own, or say why no reply is needed"),
        ({"not_refund": "1", "reply_canned": "99999"}, "not one of the replies on offer"),
        ({"not_refund": "1", "reply_words": "x" * 4001}, "at most 4000 characters"),
    ],
)
def test_bad_input_gets_a_form_error_and_changes_nothing(
    client, agent, late_order, post, error, htmx
):
    message = waiting_message()
    client.force_login(agent)
    response = client.post(sort_url(message), post, headers=HTMX if htmx else {})
    assert response.status_code == 400
    html = response.content.decode()
    assert error in html and 'role="alert"' in html
    if htmx:
        assert html.startswith(f'<article class="card message" id="message-{message.pk}"')
    else:
        assert "<html" in html
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING
    assert Ticket.objects.count() == 0 and MessageEvent.objects.count() == 0


def test_the_form_keeps_what_the_agent_picked_after_an_error(client, agent, late_order):
    message = waiting_message()
    client.force_login(agent)
    html = client.post(
        sort_url(message), opening(more_orders="9999", reason=policy.NOT_RECEIVED), headers=HTMX
    ).content.decode()
    assert 'value="9999"' in html and '<option value="not_received" selected>' in html


def test_another_customers_order_needs_the_agents_confirmation(client, agent, late_order):
    make_order("2001", name="Ben Okafor")
    message = waiting_message()
    client.force_login(agent)
    refused = client.post(sort_url(message), opening(order=["2001"]), headers=HTMX)
    assert refused.status_code == 400
    assert "belongs to Ben Okafor (ben@example.com)" in refused.content.decode()
    assert Ticket.objects.count() == 0
    confirmed = opening(order=["2001"], other_customer_ok="on")
    assert client.post(sort_url(message), confirmed, headers=HTMX).status_code == 200
    assert Ticket.objects.get().order.number == "2001"


def test_a_double_submit_opens_one_ticket_and_says_who_sorted_it(client, agent, late_order):
    message = waiting_message()
    client.force_login(agent)
    assert client.post(sort_url(message), opening(), headers=HTMX).status_code == 200
    again = client.post(sort_url(message), opening(), headers=HTMX)
    assert again.status_code == 400
    assert "already sorted by agent" in again.content.decode()
    assert Ticket.objects.count() == 1


def test_a_message_sorted_meanwhile_says_so_on_the_page_without_javascript(
    client, agent, late_order
):
    message = waiting_message()
    client.force_login(agent)
    client.post(sort_url(message), opening())
    again = client.post(sort_url(message), opening())
    assert again.status_code == 400
    assert "already sorted by agent" in again.content.decode()
    assert Ticket.objects.count() == 1


def test_an_unknown_message_is_404(client, agent):
    client.force_login(agent)
    assert client.post(reverse("reviews:message_sort", args=[999]), opening()).status_code == 404
