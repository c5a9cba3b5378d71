"""The desk's "Open a ticket" form takes a pasted customer message: it goes in through the intake
like any other, and the person lands on the message's page, which follows it to its ticket."""

from __future__ import annotations

import pytest
from django.urls import reverse

from intake import workflow
from intake.models import Message
from refunds import enqueue
from refunds.models import Ticket
from tests.conftest import make_order

URL = reverse("reviews:ticket_new")
PASTE = {
    "sender": "ana@example.com",
    "message": "Hi, my order #1042 came a week late, can I have the delivery charge back?",
}


@pytest.fixture
def woken(monkeypatch) -> list[int]:
    ids: list[int] = []
    monkeypatch.setattr(enqueue, "send", lambda name, pk: ids.append(pk) or True)
    return ids


@pytest.fixture
def desk(client, agent, django_capture_on_commit_callbacks):
    client.force_login(agent)

    def post(data: dict, **headers):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(URL, data, headers=headers)

    post.client = client
    return post


def test_a_pasted_message_goes_in_and_the_person_lands_on_its_page(desk, woken):
    response = desk(PASTE)
    message = Message.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("reviews:message", args=[message.pk])
    assert message.channel == "desk" and message.sender == "ana@example.com"
    assert woken == [message.pk]
    page = desk.client.get(response["Location"])
    assert "Being read" in page.content.decode() and "#1042" in page.content.decode()


def test_the_message_page_shows_the_ticket_once_the_intake_opened_it(desk, woken, transactional_db):
    make_order("1042")
    response = desk(PASTE)
    message = Message.objects.get()
    assert workflow.message_take(message.pk) == "finished"
    ticket = Ticket.objects.get()
    page = desk.client.get(response["Location"], headers={"HX-Request": "true"})
    assert page.status_code == 286  # placed: the page stops polling
    assert f'href="{reverse("reviews:ticket", args=[ticket.pk])}"' in page.content.decode()
    assert "Opened" in page.content.decode() and "order 1042" in page.content.decode()


def test_the_message_page_says_which_ticket_it_opened_and_which_it_was_added_to(
    desk, woken, transactional_db
):
    from refunds import services

    for number in ("1042", "1044", "1047"):
        make_order(number)
    elsewhere = services.ticket_open(order_number="1044")
    paste = PASTE | {"message": "My last three orders were all late: 1042, 1044 and 1047."}
    response = desk(paste)
    message = Message.objects.get()
    assert workflow.message_take(message.pk) == "finished"
    new = Ticket.objects.exclude(pk=elsewhere.pk).get()
    html = " ".join(desk.client.get(response["Location"]).content.decode().split())
    assert f'Opened <a href="/tickets/{new.pk}/">ticket {new.pk}</a> for orders 1042, 1047.' in html
    assert (
        f'Added to the open <a href="/tickets/{elsewhere.pk}/">ticket {elsewhere.pk}</a> '
        "for order 1044." in html
    )


def test_a_message_that_went_to_sorting_says_so_on_its_page(desk, woken, transactional_db):
    desk({"sender": "zoe@example.com", "message": "My parcel came late, refund please"})
    message = Message.objects.get()
    workflow.message_take(message.pk)
    page = desk.client.get(reverse("reviews:message", args=[message.pk]))
    assert "Needs sorting" in page.content.decode() and "no order" in page.content.decode()


def test_each_paste_is_its_own_message(desk, woken):
    desk(PASTE)
    desk(PASTE)  # a person pasting the same words twice means it: two messages, both kept
    assert Message.objects.count() == 2


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"sender": "ana@example.com", "message": "   "}, "The message has no text."),
        ({"sender": "Ana", "message": "late #1042"}, "is not an email address"),
        ({"sender": "", "message": "late #1042"}, "The sender&#x27;s address is missing."),
        ({**PASTE, "order_number": "1042"}, "not both"),
    ],
)
def test_a_paste_with_a_fault_is_a_form_error_and_stores_nothing(desk, woken, data, words):
    response = desk(data)
    assert response.status_code == 400 and words in response.content.decode()
    assert Message.objects.count() == 0
    assert PASTE["message"][:20] in response.content.decode() or data["message"].strip() == ""


def test_a_paste_over_the_limit_is_a_form_error(desk, woken, settings):
    settings.INTAKE_MAX_CHARS = 500
    response = desk({"sender": "ana@example.com", "message": "late " * 200})
    assert response.status_code == 400 and "at most 500 are taken" in response.content.decode()
    assert Message.objects.count() == 0


def test_with_htmx_a_paste_redirects_the_page_to_the_message(desk, woken):
    response = desk(PASTE, **{"HX-Request": "true"})
    message = Message.objects.get()
    assert response["HX-Redirect"] == reverse("reviews:message", args=[message.pk])


def test_typing_an_order_number_still_opens_a_ticket_directly(desk, woken, monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)
    make_order("1042")
    response = desk({"order_number": "1042", "note": "late"})
    assert response.status_code == 302 and Ticket.objects.count() == 1
    assert Message.objects.count() == 0


def test_a_person_outside_the_desk_may_not_see_a_message(client, db, woken, django_user_model):
    message = Message.objects.create(
        key="desk:x",
        channel="desk",
        sender="a@example.com",
        received_at="2026-12-01T10:00Z",
        thread_id="intake-x",
        body="hi",
    )
    client.force_login(django_user_model.objects.create_user("nobody"))
    assert client.get(reverse("reviews:message", args=[message.pk])).status_code == 403
