"""Four-eyes on every way in (issues 27 and 44): whoever brings a customer's message in (pastes it
at the desk, posts it with their API token) is the opener of the ticket it opens, recorded and
shown, and never decides it; the mail provider's message has no person; a person who sorts a
message by hand chose its orders and opens what their sort opens; a message from a desk user's
own address is no customer's and goes to a person to sort."""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from api.models import ApiToken
from intake import sorting, workflow
from intake.models import Message
from intake.services import message_receive
from refunds import enqueue, policy
from refunds.models import Decision, Ticket
from tests.conftest import make_order
from tests.reviewing import advance_to_review, decide
from tests.test_inbound_webhook import signed

LATE = "Hi, my order #1042 came a week late, can I have the delivery charge back? Ana"
NO_ORDER = "Hi, my parcel came a week late, can I have the delivery charge back? Ana"


@pytest.fixture(autouse=True)
def no_broker(monkeypatch, settings) -> None:
    """Nothing is asked of a broker: each test runs the intake and the ticket itself."""
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": "inbound-signing-key"}


@pytest.fixture
def ana(transactional_db):
    return make_order("1042", fee_cents=999)  # $9.99 late: an agent's review


def api_client(user) -> Client:
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(user)[1]}"})


def pasted(user, body: str = LATE) -> Message:
    client = Client()
    client.force_login(user)
    response = client.post(
        reverse("reviews:ticket_new"), {"sender": "ana@example.com", "message": body}
    )
    assert response.status_code == 302, response.content
    return Message.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))


def posted(user, body: str = LATE) -> Message:
    response = api_client(user).post(
        "/api/messages/",
        {"sender": "ana@example.com", "subject": "Late", "body": body},
        content_type="application/json",
        headers={"Idempotency-Key": f"hd-{Message.objects.count()}"},
    )
    assert response.status_code == 202, response.content
    return Message.objects.get(pk=response.json()["id"])


def emailed(body: str = LATE) -> Message:
    mime = (
        "From: Ana Souza <ana@example.com>\r\nSubject: Late parcel\r\n"
        "Message-ID: <m1@mail.example.com>\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"\r\n{body}\r\n"
    )
    response = Client().post("/mail/mailgun/inbound_mime/", signed({"body-mime": mime}))
    assert response.status_code == 200, response.content
    return Message.objects.get(channel=Message.Channel.EMAIL)


def opened_from(message: Message) -> Ticket:
    """Run the message's intake here, and its ticket up to the review."""
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    assert message.status == Message.Status.OPENED
    return advance_to_review(message.ticket)


def refused_everywhere(ticket: Ticket, user) -> None:
    """The service's own check, the desk's form and the API each refuse `user`'s decision."""
    with pytest.raises(PermissionDenied, match="four-eyes"):
        decide(ticket, user)
    desk = Client()
    desk.force_login(user)
    form = {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"}
    response = desk.post(reverse("reviews:decide", args=[ticket.pk]), form)
    assert response.status_code == 403 and "four-eyes" in response.content.decode()
    response = api_client(user).post(
        f"/api/tickets/{ticket.pk}/decision/",
        {"interrupt_id": ticket.pending_interrupt_id, "answer": "approve"},
        content_type="application/json",
    )
    assert response.status_code == 403 and "four-eyes" in response.json()["error"]
    assert not Decision.objects.filter(ticket=ticket).exists()
    assert ticket not in desk.get("/").context["reviews"]  # not in their queue either


def opener_words(ticket: Ticket, reader) -> str:
    client = Client()
    client.force_login(reader)
    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    found = re.search(r'<dd id="ticket-opener">(.*?) at ', html)
    assert found, html
    return " ".join(found.group(1).replace("&#x27;", "'").split())


def test_whoever_pastes_a_message_opens_its_ticket_and_never_decides_it(ana, agent, colleague):
    message = pasted(agent)
    assert message.brought_by == agent
    ticket = opened_from(message)
    assert ticket.opened_by == agent and ticket.required_role == "agent"
    refused_everywhere(ticket, agent)
    assert opener_words(ticket, colleague) == "agent from a pasted message"
    decide(ticket, colleague)  # another agent decides it
    assert Decision.objects.get(ticket=ticket).reviewer == colleague


def test_whoever_posts_a_message_to_the_api_opens_its_ticket_and_never_decides_it(
    ana, agent, colleague
):
    message = posted(agent)
    assert message.brought_by == agent
    ticket = opened_from(message)
    assert ticket.opened_by == agent
    refused_everywhere(ticket, agent)
    assert opener_words(ticket, agent) == "agent from a message sent to the API"
    response = api_client(colleague).post(
        f"/api/tickets/{ticket.pk}/decision/",
        {"interrupt_id": ticket.pending_interrupt_id, "answer": "approve"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content


def test_the_mail_providers_message_has_no_opener_and_any_agent_decides_it(ana, agent):
    message = emailed()
    assert message.brought_by is None
    ticket = opened_from(message)
    assert ticket.opened_by is None
    assert opener_words(ticket, agent) == "the intake from a customer's email"
    decide(ticket, agent)
    assert Decision.objects.get(ticket=ticket).reviewer == agent


def sorted_by(message: Message, user) -> Ticket:
    """Ana's message names no order and she has two recent ones: the intake leaves it to a
    person, and `user` sorts it into a ticket for 1042."""
    make_order("1044", fee_cents=1439)
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING
    ticket = sorting.message_sort(
        message=message, order_numbers=["1042"], reason=policy.LATE_DELIVERY, by=user
    ).opened
    return advance_to_review(ticket)


def test_whoever_sorts_an_email_by_hand_opens_its_ticket_and_never_decides_it(
    ana, agent, colleague
):
    ticket = sorted_by(emailed(NO_ORDER), agent)
    assert ticket.opened_by == agent
    refused_everywhere(ticket, agent)
    decide(ticket, colleague)
    assert Decision.objects.get(ticket=ticket).reviewer == colleague


def test_a_pasted_message_sorted_by_a_colleague_is_the_sorters(ana, agent, colleague):
    ticket = sorted_by(pasted(agent, NO_ORDER), colleague)
    assert ticket.opened_by == colleague
    refused_everywhere(ticket, colleague)
    decide(ticket, agent)  # who pasted it did not choose its order
    assert Decision.objects.get(ticket=ticket).reviewer == agent


def test_whoever_pasted_a_message_and_sorts_it_too_is_still_barred(ana, agent, colleague):
    ticket = sorted_by(pasted(agent, NO_ORDER), agent)
    assert ticket.opened_by == agent
    refused_everywhere(ticket, agent)


def test_an_agent_who_sorts_a_message_onto_another_customers_order_never_approves_it_alone(
    ana, agent, colleague
):
    """ "Open it anyway" onto someone else's order, then approve it: refused, the sorter is the
    ticket's opener (an agent refunded $14.50 to an order of their choosing this way)."""
    make_order("1050", fee_cents=1450, name="Noah Berg")
    message = emailed(NO_ORDER)
    make_order("1044", fee_cents=1439)
    assert workflow.message_take(message.pk) == "finished"
    ticket = sorting.message_sort(
        message=Message.objects.get(pk=message.pk),
        order_numbers=["1050"],
        reason=policy.LATE_DELIVERY,
        by=agent,
        other_customer_ok=True,
    ).opened
    ticket = advance_to_review(ticket)
    refused_everywhere(ticket, agent)


def test_an_email_from_a_desk_users_address_goes_to_a_person_to_sort_saying_why(ana, agent):
    """A reviewer writing in "as a customer" from their own address opens nothing they could
    approve: the message waits in Needs sorting, marked, and no ticket is opened."""
    agent.email = "Agent@Desk.Example"
    agent.save(update_fields=["email"])
    mime = (
        "From: Agent <agent@desk.example>\r\nSubject: Late parcel\r\n"
        "Message-ID: <m2@mail.example.com>\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"\r\n{LATE}\r\n"
    )
    response = Client().post("/mail/mailgun/inbound_mime/", signed({"body-mime": mime}))
    assert response.status_code == 200, response.content
    message = Message.objects.get(channel=Message.Channel.EMAIL)
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING and message.ticket is None
    assert "is the address of a desk user, not a customer's" in message.sorting_reason
    assert not Ticket.objects.exists()


def opener_everywhere(ticket: Ticket, reader) -> tuple[str, str]:
    """Who opened the ticket as the tickets list and the ticket's timeline say it."""
    client = Client()
    client.force_login(reader)
    listed = client.get(reverse("reviews:tickets")).content.decode()
    row = re.search(
        rf'href="/tickets/{ticket.pk}/".*?<div class="muted small">by (.*?)</div>', listed, re.S
    )
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    timeline = re.search(
        r'class="event event-open">.*?</span> (.*?) opened the ticket(.*?)[:.]', page
    )
    assert row and timeline, (listed, page)
    return row.group(1), timeline.group(1) + " opened the ticket" + timeline.group(2)


@pytest.mark.parametrize(
    ("came", "said"),
    [
        ("emailed", ("the intake", "The intake opened the ticket")),
        ("sorted", ("agent", "agent opened the ticket")),  # the sorter opens it
        ("pasted", ("bea", "bea opened the ticket")),
    ],
)
def test_the_list_and_the_timeline_name_the_opener_as_the_ticket_page_does(
    ana, agent, colleague, admin_user, came, said
):
    ticket = {
        "emailed": lambda: opened_from(emailed()),
        "sorted": lambda: sorted_by(emailed(NO_ORDER), agent),
        "pasted": lambda: opened_from(pasted(colleague)),
    }[came]()

    assert opener_everywhere(ticket, admin_user) == said
    assert opener_words(ticket, admin_user).startswith(said[0])


@pytest.mark.parametrize(
    ("channel", "person", "words"),
    [
        ("desk", False, "is brought in by a person"),
        ("api", False, "is brought in by a person"),
        ("email", True, "only email is not"),
    ],
)
def test_a_message_without_its_person_or_an_email_with_one_is_a_bug(
    db, agent, channel, person, words
):
    with pytest.raises(ValueError, match=words):
        message_receive(
            channel=channel,
            key="k1",
            sender="ana@example.com",
            subject="",
            body=LATE,
            received_at=timezone.now(),
            raw=json.dumps({"body": LATE}),
            brought_by=agent if person else None,
        )
    assert not Message.objects.exists()


def parsed_email(verdicts: list[list[str]]) -> Message:
    """Ana's email by Mailgun's parsed route, its checks' verdicts among its headers (topmost
    first, as a receiver adds them)."""
    headers = [
        *verdicts,
        ["From", "Ana Souza <ana@example.com>"],
        ["Subject", "Late parcel"],
        ["Message-Id", "<m3@mail.example.com>"],
    ]
    fields = signed({"body-plain": LATE, "message-headers": json.dumps(headers)})
    response = Client().post("/mail/mailgun/inbound/", fields)
    assert response.status_code == 200, response.content
    return Message.objects.get(channel=Message.Channel.EMAIL)


FAILED = {
    "Mailgun's": [["X-Mailgun-Spf", "Fail"], ["X-Mailgun-Dkim-Check-Result", "Fail"]],
    "a receiver's Authentication-Results": [
        [
            "Authentication-Results",
            "mx.example; spf=softfail smtp.mailfrom=ana@example.com; dkim=none",
        ]
    ],
    "Mailgun's, with passes the sender wrote below them": [
        ["X-Mailgun-Spf", "Fail"],
        ["X-Mailgun-Dkim-Check-Result", "Fail"],
        ["X-Mailgun-Spf", "Pass"],
        ["Authentication-Results", "forged.example; spf=pass; dkim=pass"],
    ],
}


@pytest.mark.parametrize("verdicts", FAILED.values(), ids=FAILED)
def test_an_email_whose_providers_checks_fail_goes_to_a_person_to_sort_saying_why(ana, verdicts):
    """Anyone can write Ana's address in a From (an agent did, then approved the ticket alone):
    when the provider's checks pass neither SPF nor DKIM, a person sorts it, and no ticket opens."""
    message = parsed_email(verdicts)
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    assert message.status == Message.Status.NEEDS_SORTING and message.ticket is None
    assert message.sorting_reason.startswith(
        "The mail provider's checks did not confirm the sender"
    )
    assert not Ticket.objects.exists()


@pytest.mark.parametrize(
    "verdicts",
    [
        [["X-Mailgun-Spf", "Pass"], ["X-Mailgun-Dkim-Check-Result", "Pass"]],
        [["X-Mailgun-Spf", "SoftFail"], ["X-Mailgun-Dkim-Check-Result", "Pass"]],  # forwarded
        [],  # a provider that gives none: as before
    ],
    ids=["both pass", "DKIM passes", "no verdicts"],
)
def test_an_email_whose_provider_confirms_the_sender_or_says_nothing_opens_its_ticket(
    ana, verdicts
):
    ticket = opened_from(parsed_email(verdicts))
    assert ticket.opened_by is None and ticket.order.number == "1042"
