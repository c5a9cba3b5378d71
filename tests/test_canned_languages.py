"""Canned replies in each language the desk writes (CannedReason and its CannedReasonTexts, kept
in Django admin): a customer is sent a canned reply in their language where it has words in it;
where it has none it goes in English, and the reviewer is told so on the option before picking
it (the ticket page, the queue card, Needs sorting)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from intake import sorting
from refunds import enqueue, runner, services, tasks
from refunds.models import CannedReason, CannedReasonText, Email
from refunds.services.asking import question_words
from tests.sorting_messages import a_reading, waiting_message


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    sent: list[int] = []
    monkeypatch.setattr(enqueue, "resend_on_commit", sent.append)
    return sent


def canned(use: str, title: str, text: str, **texts: str) -> CannedReason:
    reply = CannedReason.objects.create(use=use, title=title, text=text)
    for language, words in texts.items():
        CannedReasonText.objects.create(canned=reply, language=language, text=words)
    return reply


def test_a_canned_reply_is_read_in_the_customers_language_or_else_in_english(db):
    reply = canned("set_aside", "Address", "We cannot change it.", es="No podemos cambiarla.")

    assert reply.text_in("es") == "No podemos cambiarla."
    assert reply.text_in("es-MX") == "No podemos cambiarla."
    assert reply.text_in("en") == reply.text_in("") == "We cannot change it."
    assert reply.text_in("de") is None  # it goes in English, and the desk says so


def test_a_set_aside_reply_in_the_customers_language_goes_in_it(
    transactional_db, agent, smtp, enqueued
):
    reply = canned(
        "set_aside",
        "Address",
        "This desk handles refunds only.",
        es="Este servicio solo gestiona reembolsos.",
    )
    message = waiting_message(subject="", reading=a_reading() | {"language": "es"})

    sorting.message_mark_not_refund(message=message, by=agent, canned=reply)
    tasks.resend_email(enqueued[0])

    (mail,) = smtp.delivered
    body = mail.body.replace("\r\n", "\n")
    assert (
        body == "Hola, Ana:\n\nEste servicio solo gestiona reembolsos.\n\nEl equipo de reembolsos\n"
    )


def test_a_set_aside_reply_without_the_customers_language_goes_wholly_in_english(
    transactional_db, agent, smtp, enqueued
):
    reply = canned("set_aside", "Address", "This desk handles refunds only.")
    message = waiting_message(subject="", reading=a_reading() | {"language": "de"})

    sorting.message_mark_not_refund(message=message, by=agent, canned=reply)
    tasks.resend_email(enqueued[0])

    (mail,) = smtp.delivered
    body = mail.body.replace("\r\n", "\n")
    assert body == "Hello Ana,\n\nThis desk handles refunds only.\n\nThe Refund Desk\n"
    assert Email.objects.get(pk=enqueued[0]).language == "en"


def test_needs_sorting_says_which_replies_go_in_english(client, agent):
    canned("set_aside", "Address", "This desk handles refunds only.", de="Nur Erstattungen.")
    canned("set_aside", "Wholesale", "Write to sales.")
    waiting_message(reading=a_reading() | {"language": "de"})
    client.force_login(agent)

    page = client.get(reverse("reviews:needs_sorting")).content.decode()

    assert ">Address</option>" in page
    assert ">Wholesale (goes in English: no German text)</option>" in page


def test_the_ticket_page_and_the_queue_say_which_replies_go_in_english(
    transactional_db, agent, colleague, late_order
):
    canned("reject", "Too late", "The window closed.", es="El plazo terminó.")
    canned("reject", "Used", "It was used.")
    canned("ask", "Photo", "Could you send a photo?")
    ticket = services.ticket_open(
        order_number=late_order.number,
        opened_by=colleague,
        reading=a_reading() | {"language": "es"},
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    client = Client()
    client.force_login(agent)

    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    queue = client.get(reverse("reviews:queue")).content.decode()

    assert ">Too late: The window closed.</option>" in page
    assert ">Used (goes in English: no Spanish text): It was used.</option>" in page
    assert ">Could you send a photo? (goes in English: no Spanish text)</option>" in page
    assert ">Too late</option>" in queue
    assert ">Used (goes in English: no Spanish text)</option>" in queue


def test_an_english_customers_options_say_nothing_of_language(
    transactional_db, agent, colleague, late_order
):
    canned("reject", "Used", "It was used.")
    ticket = services.ticket_open(order_number=late_order.number, opened_by=colleague)
    assert runner.advance(ticket.pk) == "awaiting_review"
    client = Client()
    client.force_login(agent)

    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()

    assert ">Used: It was used.</option>" in page


def test_a_canned_question_is_asked_in_the_customers_language_where_it_has_one(db):
    photo = canned(
        "ask", "Photo", "Could you send a photo?", fr="Pourriez-vous envoyer une photo ?"
    )

    asked = question_words("Merci.", photo, language="fr")

    assert asked == "Pourriez-vous envoyer une photo ? Merci."
    assert question_words("", photo, language="it") == ("Could you send a photo?")


def test_admins_keep_a_replys_texts_in_other_languages(admin_client):
    response = admin_client.post(
        reverse("admin:refunds_cannedreason_add"),
        {
            "title": "Used",
            "text": "It was used.",
            "use": "reject",
            "active": "on",
            "position": "0",
            "texts-TOTAL_FORMS": "1",
            "texts-INITIAL_FORMS": "0",
            "texts-0-language": "pt",
            "texts-0-text": "Foi usado.",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    assert CannedReason.objects.get(title="Used").text_in("pt") == "Foi usado."


def test_a_queue_card_follows_a_text_added_in_the_customers_language(
    transactional_db, agent, colleague, late_order
):
    """The queue keeps a card while nothing it shows changes (reviews/rows.py): a reply's new
    text in the customer's language is a change."""
    used = canned("reject", "Used", "It was used.")
    ticket = services.ticket_open(
        order_number=late_order.number,
        opened_by=colleague,
        reading=a_reading() | {"language": "es"},
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    client = Client()
    client.force_login(agent)
    assert "Used (goes in English" in client.get(reverse("reviews:queue")).content.decode()

    CannedReasonText.objects.create(canned=used, language="es", text="Fue usado.")

    assert ">Used</option>" in client.get(reverse("reviews:queue")).content.decode()


def spanish_review(order, opener):
    ticket = services.ticket_open(
        order_number=order.number, opened_by=opener, reading=a_reading() | {"language": "es"}
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    return ticket


def the_customers_email(smtp) -> str:
    *_, mail = smtp.delivered
    return " ".join(mail.body.split())


def test_a_rejection_with_a_canned_reply_goes_in_the_customers_language(
    transactional_db, agent, colleague, late_order, smtp
):
    used = canned("reject", "Used", "It was used.", es="Fue usado.")
    ticket = spanish_review(late_order, colleague)
    client = Client()
    client.force_login(agent)

    client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {"interrupt_id": ticket.pending_interrupt_id, "reject": "1", "canned": used.pk},
    )
    runner.advance(ticket.pk)

    assert "Fue usado." in the_customers_email(smtp)


def test_a_canned_question_goes_in_the_customers_language(
    transactional_db, agent, colleague, late_order, smtp
):
    photo = canned("ask", "Photo", "Could you send a photo?", es="¿Podría enviar una foto?")
    ticket = spanish_review(late_order, colleague)

    services.ticket_ask(
        ticket=ticket, interrupt_id=ticket.pending_interrupt_id, reviewer=agent, canned=photo
    )
    runner.advance(ticket.pk)

    assert "¿Podría enviar una foto?" in the_customers_email(smtp)
