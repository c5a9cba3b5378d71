"""What customers read, at a real SMTP server as their mail client gets it: each email in the
language their message was read in (Django's catalogues, locale/), English where a catalogue has
no words; a refund of less than asked says so, with the total and the reviewer's reason; every
email of a ticket threads with the customer's own message and with the ones before it."""

from __future__ import annotations

import gettext
import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.template import Context, Template
from django.utils import timezone, translation

from intake import workflow
from intake.models import Message
from intake.services import message_receive
from refunds import emails, enqueue, runner
from refunds.models import Email
from tests.conftest import make_order
from tests.reviewing import decide

LOCALE = Path(settings.BASE_DIR) / "locale"

LATE = {
    "es": "Hola, mi pedido #{n} llegó con una semana de retraso. ¿Me pueden devolver los gastos "
    "de envío? Gracias, Ana",
    "de": "Hallo, meine Bestellung #{n} kam eine Woche zu spät an. Können Sie mir die "
    "Versandkosten erstatten? Danke, Ana",
    "fr": "Bonjour, ma commande #{n} est arrivée avec une semaine de retard. Pouvez-vous me "
    "rembourser les frais de livraison ? Merci, Ana",
}
RECEIVED = {
    "es": "Hemos abierto una solicitud de reembolso para el pedido 1042.",
    "de": "Wir haben einen Erstattungsantrag für die Bestellung 1042 angelegt.",
    "fr": "Nous avons ouvert une demande de remboursement pour la commande 1042.",
}
# The refund email says the refund has started and how long it usually takes, never "refunded".
TAKES = {
    "en": "a refund usually takes 5 to 10 business days to show on your statement",
    "es": "un reembolso suele tardar de 5 a 10 días hábiles en aparecer en su extracto",
    "de": "Eine Erstattung erscheint meist nach 5 bis 10 Werktagen auf Ihrem Kontoauszug",
    "fr": "un remboursement met en général 5 à 10 jours ouvrés à apparaître sur votre relevé",
    "pt": "um reembolso demora normalmente 5 a 10 dias úteis a aparecer no seu extrato",
    "it": "di solito un rimborso compare sull'estratto conto dopo 5-10 giorni lavorativi",
}
# What the email said before it was true only of a refund Stripe had finished.
SAID_DONE = {
    "en": "We refunded",
    "es": "Le hemos reembolsado",
    "de": "erstattet",
    "fr": "avons remboursé",
    "pt": "Reembolsámos",
    "it": "abbiamo rimborsato",
}
REFUNDED = {
    "es": (
        "Su reembolso del pedido 1042",
        "Hemos iniciado un reembolso de $6.99 de gastos de envío",
    ),
    "de": (
        "Ihre Erstattung für die Bestellung 1042",
        "Wir haben eine Erstattung von $6.99 Versandkosten",
    ),
    "fr": (
        "Votre remboursement pour la commande 1042",
        "Nous avons lancé un remboursement de $6.99",
    ),
}


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    """The test runs the intake and the ticket itself; no worker is asked."""
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)


def email_in(body: str, *, message_id: str, subject: str = "Pedido") -> Message:
    """A customer's email as the mail provider hands it over, taken through the intake."""
    message, _ = message_receive(
        channel="email",
        key=message_id,
        message_id=message_id,
        sender="ana@example.com",
        sender_name="Ana Souza",
        subject=subject,
        body=body,
        received_at=timezone.now(),
        raw=body,
    )
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    return message


@pytest.mark.parametrize("language", ["es", "de", "fr"])
def test_a_customer_hears_in_the_language_they_wrote_in(
    transactional_db, smtp, agent, client, language
):
    make_order("1042")
    message = email_in(LATE[language].format(n=1042), message_id=f"<{language}@customer.test>")
    assert message.reading["language"] == language
    ticket = message.ticket
    assert runner.advance(ticket.pk) == "awaiting_review"
    (received,) = smtp.delivered
    assert RECEIVED[language] in received.body and "Someone on our team" not in received.body
    ticket.refresh_from_db()
    decide(ticket, agent)
    assert runner.advance(ticket.pk) == "refunded"
    refunded = smtp.delivered[1]
    subject, words = REFUNDED[language]
    assert refunded.subject == subject and words in refunded.body
    assert TAKES[language] in " ".join(refunded.body.split())
    assert SAID_DONE[language].lower() not in refunded.body.lower()
    # The desk reads it in English, told which language the customer got it in.
    client.force_login(agent)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    name = {"es": "Spanish", "de": "German", "fr": "French"}[language]
    assert f"Sent in {name}; what it says in English" in page
    assert "We have started a refund of $6.99 in shipping for order 1042" in page
    sent = Email.objects.get(key=refunded.key)
    assert sent.language == language and sent.body == refunded.body.replace("\r\n", "\n")


@pytest.mark.parametrize("language", ["es", "de", "fr"])
def test_a_message_for_a_person_is_acknowledged_in_its_language(transactional_db, smtp, language):
    """A message that names no order of the sender goes to Needs sorting; its acknowledgment
    (the intake's own email) is in the customer's language too."""
    words = {
        "es": (
            "Hola, mi paquete llegó tarde y quiero que me devuelvan el envío. Gracias",
            "Hola, Ana:",
        ),
        "de": (
            "Hallo, mein Paket kam zu spät an, bitte erstatten Sie den Versand. Danke",
            "Hallo Ana,",
        ),
        "fr": (
            "Bonjour, mon colis est arrivé en retard, merci de me rembourser la livraison.",
            "Bonjour Ana,",
        ),
    }
    body, hello = words[language]
    message = email_in(body, message_id=f"<ack-{language}@customer.test>", subject="Retard")
    assert message.status == Message.Status.NEEDS_SORTING
    (ack,) = smtp.delivered
    assert ack.subject == "Re: Retard" and ack.body.startswith(hello)
    assert ack.in_reply_to == f"<ack-{language}@customer.test>"


def test_a_line_break_in_the_customers_subject_stays_in_the_acknowledgments_subject(
    transactional_db, smtp
):
    """The subject is the first line of the email's words: a line break in it began the body."""
    email_in(
        "Hello, my parcel arrived a week late. Ana",
        message_id="<two-lines@customer.test>",
        subject="Late\r\nYour refund of $500 is approved",
    )
    (ack,) = smtp.delivered
    assert ack.subject == "Re: Late Your refund of $500 is approved"
    assert "$500" not in ack.body


ASKS_FOR_THE_NUMBER = "replying with the order number helps us find it"


def test_an_acknowledgment_never_asks_for_the_order_number_the_message_gave(transactional_db, smtp):
    message = email_in(
        "Hello, my order 5555 arrived a week late. Can I have the shipping back? Ana",
        message_id="<gave-its-number@customer.test>",
        subject="Late parcel",
    )

    assert message.status == Message.Status.NEEDS_SORTING  # no such order at the desk
    (ack,) = smtp.delivered
    said = " ".join(ack.body.split())
    assert "A person on our team will read your message and get back to you." in said
    assert ASKS_FOR_THE_NUMBER not in said


def test_an_acknowledgment_asks_for_the_order_number_when_the_message_gave_none(
    transactional_db, smtp
):
    email_in(
        "Hello, my parcel arrived a week late. Can I have the shipping back? Ana",
        message_id="<gave-no-number@customer.test>",
        subject="Late parcel",
    )

    (ack,) = smtp.delivered
    said = " ".join(ack.body.split())
    assert (
        "A person on our team will read your message and get back to you. If it is about an "
        f"order, {ASKS_FOR_THE_NUMBER}." in said
    )


def test_a_policy_refusal_is_in_the_customers_language(transactional_db, smtp):
    make_order("1042", late=-3)  # three days early
    message = email_in(LATE["fr"].format(n=1042), message_id="<fr-early@customer.test>")
    assert runner.advance(message.ticket.pk) == "declined"
    (only,) = smtp.delivered
    assert only.subject == "À propos de votre demande de remboursement pour la commande 1042"
    assert "ne pouvons pas vous rembourser" in only.body
    assert "Votre commande est arrivée 3 jours en avance" in only.body


def test_a_partial_refund_says_it_is_part_with_the_total_and_why(transactional_db, smtp, manager):
    make_order("7001", fee_cents=1450)
    message = email_in(LATE["de"].format(n=7001), message_id="<de-part@customer.test>")
    ticket = message.ticket
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    from refunds import services

    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(
            ticket,
            answer="approve",
            reason="Die Hälfte des Pakets kam pünktlich.",
            amount_cents=1000,
        ),
    )
    assert runner.advance(ticket.pk) == "refunded"
    told = smtp.delivered[-1]
    assert "Wir haben eine Erstattung von $10.00 der beantragten $14.50 Versandkosten" in told.body
    assert "Warum nicht alles: Die Hälfte des Pakets kam pünktlich." in told.body
    desk = Email.objects.get(key=told.key).desk_text
    assert (
        "We have started a refund of $10.00 of the $14.50 you asked for in shipping for order 7001"
        in desk
    )
    assert "Why not all of it: Die Hälfte des Pakets kam pünktlich." in desk


ONE_ORDER = {
    "customer_name": "Ana",
    "orders": ["1042"],
    "refunded": [
        {"number": "1042", "asked_cents": 699, "paid_cents": 699, "receipt": "re_1", "part": False}
    ],
    "not_refunded": [],
    "asked_cents": 699,
    "paid_cents": 699,
    "part": False,
}
SEVERAL = ONE_ORDER | {
    "orders": ["1042", "1044"],
    "refunded": ONE_ORDER["refunded"] + [{**ONE_ORDER["refunded"][0], "number": "1044"}],
}
LINES = ONE_ORDER | {
    "refunded": [
        {
            **ONE_ORDER["refunded"][0],
            "given": [{"quantity": 1, "title": "Vase", "amount_cents": 699, "restock": False}],
        }
    ]
}


@pytest.mark.parametrize("language", sorted(TAKES))
@pytest.mark.parametrize(
    "facts",
    [
        ONE_ORDER | {"why": {"late_by_days": 2}},
        ONE_ORDER | {"why": {"reason": "damaged"}},
        SEVERAL | {"why": {"late_by_days": 2}},
        LINES | {"why": {"reason": "damaged"}},
    ],
    ids=["late", "reason", "several", "lines"],
)
def test_the_refund_email_says_started_and_how_long_in_every_language(language, facts):
    """Stripe has not said `succeeded` when the email goes (and a card refund takes days to
    reach the customer even then): every form of the email says the refund has started."""
    _, body = emails.render("refunded", facts, language)
    said = " ".join(body.split())

    assert TAKES[language] in said
    assert SAID_DONE[language].lower() not in said.lower()


def test_a_partial_refund_of_several_orders_gives_each_and_the_total():
    facts = {
        "customer_name": "Ana",
        "orders": ["1042", "1044"],
        "refunded": [
            {
                "number": "1042",
                "asked_cents": 4800,
                "paid_cents": 1500,
                "receipt": "r1",
                "part": True,
                "why_part": "Only the second box was late.",
            },
            {
                "number": "1044",
                "asked_cents": 699,
                "paid_cents": 699,
                "receipt": "r2",
                "part": False,
                "why_part": "",
            },
        ],
        "not_refunded": [],
        "asked_cents": 5499,
        "paid_cents": 2199,
        "part": True,
        "why": {"late_by_days": 2},
    }
    _, body = emails.render("refunded", facts)
    assert "We have started refunding part of the shipping fee:" in body
    assert (
        "- Order 1042: $15.00 of the $48.00 asked (receipt r1), because: Only the second box"
        in body
    )
    assert "- Order 1044: $6.99 (receipt r2)" in body
    assert "In total: $21.99 of the $54.99 you asked for." in body


def test_every_email_of_a_ticket_threads_with_the_customers_message_and_the_earlier_ones(
    transactional_db, smtp, agent
):
    make_order("1042")
    message = email_in(LATE["es"].format(n=1042), message_id="<thread@customer.test>")
    ticket = message.ticket
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    decide(ticket, agent)
    assert runner.advance(ticket.pk) == "refunded"
    received, refunded = smtp.delivered
    assert received.in_reply_to == "<thread@customer.test>"
    assert received.references == "<thread@customer.test>"
    assert refunded.in_reply_to == "<thread@customer.test>"
    assert refunded.references == f"<thread@customer.test> {received.message_id}"
    assert Message.objects.get(pk=message.pk).message_id == "<thread@customer.test>"


@pytest.mark.parametrize("kind", ["received", "refunded", "refused", "refund_failed"])
def test_every_email_greets_by_first_name_and_signs_as_the_acknowledgment_does(kind):
    """Read in one conversation, "Hello Iris," then "Hello Iris Kwan," and "The Refund Desk" then
    "Refund Desk" read as two senders: each email greets and signs the same way."""
    facts = {
        "customer_name": "Iris Kwan",
        "orders": ["1090"],
        "number": "1090",
        "amount_cents": 850,
        "refunded": [],
        "not_refunded": [{"number": "1090", "why_not": "Not covered."}],
    }
    _subject, body = emails.render(kind, facts, "en")
    assert body.startswith("Hello Iris,\n") and body.endswith("\nThe Refund Desk\n"), body
    _subject, body = emails.render(kind, facts | {"customer_name": ""}, "en")
    assert body.startswith("Hello,\n"), body


def test_a_string_missing_from_a_catalogue_reads_in_english():
    template = Template(
        '{% load i18n %}{% translate "Thank you for writing to us." %} '
        '{% translate "A sentence no catalogue has." %}'
    )
    with translation.override("es"):
        said = template.render(Context())
    assert said == "Gracias por escribirnos. A sentence no catalogue has."
    # A language we have no catalogue for reads in English altogether.
    subject, body = emails.render("received", {"customer_name": "Ana", "orders": ["1042"]}, "nl")
    assert subject == "We got your refund request for order 1042"
    assert body.startswith("Hello Ana,")


def test_every_language_the_reader_tells_apart_has_a_complete_catalogue():
    # The reader tells apart the languages of settings.LANGUAGES (intake/reader/rules.py).
    ours = {code for code, _ in settings.LANGUAGES}
    for code in ours - {"en"}:
        po = (LOCALE / code / "LC_MESSAGES" / "django.po").read_text()
        entries = po.split("\n\n")[1:]
        # An empty msgstr is one not followed by a continuation line (makemessages wraps long
        # ones as `msgstr ""` then `"..."` lines).
        empty = [e for e in entries if re.search(r'^msgstr(\[\d\])? ""\n(?!")', e + "\n", re.M)]
        assert entries and not empty, (code, empty)
        assert "fuzzy" not in po, code


def test_the_compiled_catalogues_match_their_sources(tmp_path):
    """The .mo files are committed: each says what its .po says (run `manage.py
    compilemessages` after editing a .po)."""
    for po in sorted(LOCALE.glob("*/LC_MESSAGES/django.po")):
        fresh = tmp_path / f"{po.parent.parent.name}.mo"
        subprocess.run(["msgfmt", "--check", "-o", str(fresh), str(po)], check=True)
        with fresh.open("rb") as a, po.with_suffix(".mo").open("rb") as b:
            want, have = gettext.GNUTranslations(a), gettext.GNUTranslations(b)
        msgids = [(context, m) for context, m in _msgids(po) if m]
        assert msgids
        for context, msgid in msgids:
            if context:
                assert have.pgettext(context, msgid) == want.pgettext(context, msgid), (po, msgid)
                continue
            assert have.gettext(msgid) == want.gettext(msgid), (po, msgid)
            assert have.ngettext(msgid, msgid, 2) == want.ngettext(msgid, msgid, 2), (po, msgid)


def _msgids(po: Path) -> list[tuple[str, str]]:
    """(context, msgid) of each entry of a .po file."""
    import ast

    found: list[tuple[str, str]] = []
    context, current, field = "", None, ""
    for line in po.read_text().splitlines():
        if line.startswith("msgctxt "):
            context, field = ast.literal_eval(line[8:]), "msgctxt"
        elif line.startswith("msgid "):
            current, field = ast.literal_eval(line[6:]), "msgid"
        elif line.startswith('"') and field == "msgid" and current is not None:
            current += ast.literal_eval(line)
        elif line.startswith('"') and field == "msgctxt":
            context += ast.literal_eval(line)
        else:
            if current is not None:
                found.append((context, current))
                context = ""
            current, field = None, ""
    return found
