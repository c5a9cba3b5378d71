"""The rules reader reads what customers write: order numbers however they are written and
never a date, phone number, postcode, amount, year or tracking number; the customer's newest
words before what they quote or forward; the reason in six languages, typos and all; an amount;
the language; a summary; and the customer's own words behind each field."""

from __future__ import annotations

import time

import pytest

from intake.reader import rules
from refunds import policy


def read(body: str, subject: str = ""):
    return rules.read(sender="ana@example.com", subject=subject, body=body)


# --- order numbers ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "orders"),
    [
        ("it was #1042, thanks", ["1042"]),
        ("my order 1042 came late", ["1042"]),
        ("Order no. 1042 was late", ["1042"]),
        ("order number: 1042", ["1042"]),
        ("the order number is 1042", ["1042"]),
        ("mi pedido 1042 llegó tarde", ["1042"]),
        ("pedido nº 1042", ["1042"]),
        ("ma commande n° 1042 est en retard", ["1042"]),
        ("numéro de commande 1042", ["1042"]),
        ("meine Bestellung 1042 kam zu spät", ["1042"]),
        ("Bestellnummer 1042", ["1042"]),
        ("a minha encomenda 1042 chegou tarde", ["1042"]),
        ("il mio ordine n. 1042 è in ritardo", ["1042"]),
        ("orders 1042, 1044 and 1047 were late", ["1042", "1044", "1047"]),
        ("#1042, #1044 y #1047", ["1042", "1044", "1047"]),
        ("pedidos 1042 y 1044", ["1042", "1044"]),
        ("commandes 1042 et 1044", ["1042", "1044"]),
        ("order #L000123 was late", ["L000123"]),
        ("my last three orders were all late: 1042, 1044 and 1047", ["1042", "1044", "1047"]),
        ("mis pedidos llegaron tarde: 1042 y 1044", ["1042", "1044"]),
    ],
)
def test_order_numbers_are_read_however_the_customer_writes_them(body, orders):
    assert read(body).orders == orders


def test_a_number_in_the_subject_is_an_order_when_the_body_names_none():
    assert read("it came a week late", subject="Refund for 1042").orders == ["1042"]
    assert read("it came a week late", subject="Re: Your order #1042 has shipped").orders == [
        "1042"
    ]


@pytest.mark.parametrize(
    "body",
    [
        "It should have come on 12/03/2025, it came on 2025-03-19.",
        "Call me on +1 555 123 4567 or (415) 555-0199 or 555-201-3344.",
        "Tel. 030 12345678",
        "I paid $1042.00, or 1042 € if you prefer, for order stuff",
        "my order from 2024 took three weeks",
        "tracking #9400111899223850 says nothing, tracking number 1Z999AA10123456784",
        "ticket #5521 and case #7781 are still open, invoice #8890 too",
        "Apt #302, 1200 Main St, zip 10001, postcode 94107",
        "It came on 14 March at 10:42.",
        "order shipped in March 2025, 3 days late",
        "mi pedido de 2024 llegó tarde, la commande du 2023 aussi",
        "the whole order 129,90 € came late, order #1,042.00 charged",
        "my order came late: 12/03/2025, by 3 days, at 10:42",
    ],
)
def test_dates_phones_amounts_years_postcodes_and_tracking_numbers_are_not_orders(body):
    assert read(body).orders == []


def test_an_amount_right_after_an_order_number_leaves_the_order_number_alone():
    assert read("I was charged twice for order #1080, $25.98 instead of $12.99.").orders == ["1080"]


# --- the customer's newest words first ------------------------------------------------------------
REPLY = """No, the order number is 1089, not 1098. It was the broken teapot.

On Wed, Mar 5, 2025 at 2:10 PM Refund Desk <refunds@example.com> wrote:
> Hello, we could not find order 1098 in our system.
> Is it late?"""


def test_a_reply_is_read_from_the_customers_own_words_not_the_quoted_ones():
    reading = read(REPLY, subject="Re: Your refund request")
    assert reading.orders == ["1089"]
    assert reading.reason == policy.DAMAGED


FORWARD = """see below. it never came.

---------- Forwarded message ---------
From: Shop <orders@shop.example>
Date: Fri, 28 Feb 2025
Subject: Order confirmation

Thanks for your purchase! Order number: 1088
Total: $42.00
Customer service: 1-800-555-0100"""


def test_an_order_only_a_forwarded_message_carries_is_still_found():
    reading = read(FORWARD, subject="Fwd: Order confirmation")
    assert reading.orders == ["1088"]
    assert reading.reason == policy.NOT_RECEIVED
    assert reading.amount_cents is None  # the shop's total is not what the customer asks


def test_a_reason_named_in_the_quoted_part_beats_a_bare_refund_please_above_it():
    body = (
        "Any news?? I asked for the delivery fee back a week ago.\n\n"
        "On Mon, 10 Mar 2025 at 09:00, Abe <abe@example.com> wrote:\n"
        "> Order 1092 was 4 days late, please refund the delivery."
    )
    reading = read(body)
    assert (reading.orders, reading.reason) == (["1092"], policy.LATE_DELIVERY)


def test_the_quoted_headers_of_our_own_desk_do_not_read_as_a_refund_request():
    body = (
        "Thanks, that answers my question. Have a great weekend!\n\n"
        "On Tue, 4 Mar 2025, 09:15, Refund Desk <refunds@example.com> wrote:\n"
        "> Hi Una, the store opens at 9am."
    )
    assert read(body).reason == policy.NOT_REFUND


def test_the_header_lines_of_a_forwarded_message_are_not_read_for_a_reason():
    body = (
        "FYI, see below.\n\n---------- Forwarded message ---------\n"
        "From: Una <una@example.com>\nDate: Tue, 4 Mar 2025\n"
        "To: Refund Desk <refunds@example.com>\nSubject: opening hours\n\n"
        "When does the store open?"
    )
    assert read(body).reason == policy.NOT_REFUND


def test_an_outlook_forward_is_read_below_its_header_block():
    body = (
        "Forwarding my wife's email.\n\n-----Original Message-----\nFrom: Layla <l@example.com>\n"
        "Sent: Thursday, March 6, 2025 11:03 AM\nSubject: complaint\n\n"
        "The plates in order 1091 arrived chipped and two were broken."
    )
    reading = read(body)
    assert (reading.orders, reading.reason) == (["1091"], policy.DAMAGED)


# --- the reason ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("My order came a week late.", policy.LATE_DELIVERY),
        ("It did not arrive on time, it came the Tuesday after.", policy.LATE_DELIVERY),
        ("It finally got here today, 5 days late.", policy.LATE_DELIVERY),
        ("Mi pedido llegó con retraso.", policy.LATE_DELIVERY),
        ("Ma commande est arrivée avec cinq jours de retard.", policy.LATE_DELIVERY),
        ("Die Lieferung war verspätet.", policy.LATE_DELIVERY),
        ("A encomenda chegou com dez dias de atraso.", policy.LATE_DELIVERY),
        ("Il mio ordine è arrivato in ritardo.", policy.LATE_DELIVERY),
        ("The mug was smashed into pieces.", policy.DAMAGED),
        ("El jarrón llegó roto.", policy.DAMAGED),
        ("La tasse est arrivée cassée.", policy.DAMAGED),
        ("Die Vase war zerbrochen.", policy.DAMAGED),
        ("Chegou com o ecrã partido.", policy.DAMAGED),
        ("Il frullatore è arrivato rotto.", policy.DAMAGED),
        ("The charger stopped working after one day.", policy.DAMAGED),
        ("My order never arrived.", policy.NOT_RECEIVED),
        ("I havent recieved my order yet.", policy.NOT_RECEIVED),
        ("El pedido nunca llegó.", policy.NOT_RECEIVED),
        ("Je n'ai jamais reçu ma commande.", policy.NOT_RECEIVED),
        ("Das Paket ist nie angekommen.", policy.NOT_RECEIVED),
        ("O meu pedido ainda não chegou.", policy.NOT_RECEIVED),
        ("Il pacco non è mai arrivato.", policy.NOT_RECEIVED),
        ("Package lost in the post I think.", policy.NOT_RECEIVED),
        ("You sent me the wrong item!", policy.WRONG_ITEM),
        ("This is not what I ordered.", policy.WRONG_ITEM),
        ("Me mandaron la talla equivocada.", policy.WRONG_ITEM),
        ("J'ai reçu le mauvais article.", policy.WRONG_ITEM),
        ("Sie haben mir den falschen Artikel geschickt.", policy.WRONG_ITEM),
        ("Veio o produto errado.", policy.WRONG_ITEM),
        ("Mi hanno mandato un articolo sbagliato.", policy.WRONG_ITEM),
    ],
)
def test_the_reason_is_read_in_six_languages(body, reason):
    assert read(body).reason == reason


@pytest.mark.parametrize(
    "body",
    [
        "The box arrived but the charger was missing.",
        "The cable is not in the box.",
        "It came without the charger.",
        "Mi pedido llegó pero faltaba el cargador.",
        "Dans ma commande il manquait le chargeur.",
        "In meiner Bestellung fehlte das Ladegerät.",
        "Na minha encomenda faltava o carregador.",
        "Nel mio ordine mancava il caricabatterie.",
        "The box was empty.",
        "My parcel arrived today but the box was completely empty.",
        "La caja llegó vacía.",
        "Le colis est arrivé vide.",
        "Das Paket war leer.",
        "A caixa chegou vazia.",
        "Il pacco è arrivato vuoto.",
    ],
)
def test_a_part_missing_or_an_empty_box_is_read_as_not_received_in_six_languages(body):
    assert read(body).reason == policy.NOT_RECEIVED


@pytest.mark.parametrize(
    "body",
    [
        "Nothing is missing, but can you change the delivery address for order 1083?",
        "Es fehlt nichts, danke! Können Sie die Adresse ändern?",
        "Non manca niente, grazie! Potete cambiare l'indirizzo?",
    ],
)
def test_nothing_missing_is_not_a_part_missing(body):
    assert read(body).reason == policy.NOT_REFUND


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("it was dammaged when it arived", policy.DAMAGED),
        ("the lamp is damged", policy.DAMAGED),
        ("my order was delayd by a week", policy.LATE_DELIVERY),
        ("refnd plz", policy.OTHER_REQUEST),
        ("can i get a refudn", policy.OTHER_REQUEST),
    ],
)
def test_typos_are_tolerated(body, reason):
    assert read(body).reason == reason


def test_a_negated_reason_is_not_the_reason():
    assert read("It was not damaged, just late by 4 days.").reason == policy.LATE_DELIVERY
    assert read("It wasn't late, it was on time, just broken.").reason == policy.DAMAGED


@pytest.mark.parametrize(
    "body",
    [
        "Please cancel order 1079, I ordered it by mistake.",
        "I was charged twice for order 1080.",
        "Can I return the jacket for a full refund?",
        "Could I please get a refund for my last order?",
    ],
)
def test_money_asked_back_for_no_named_reason_is_another_request(body):
    assert read(body).reason == policy.OTHER_REQUEST


@pytest.mark.parametrize(
    "body",
    [
        "Do you have the green raincoat in size S back in stock?",
        "Can you change the delivery address for order 1083?",
        "Got my refund, thanks a lot!",
        "Merci beaucoup pour le remboursement rapide !",
        "Just wanted to say thanks, great service!",
        "Buenas tardes, ¿tienen la chaqueta roja en talla 38?",
        "Dear Refund Desk, do you have the blue one in stock? (I wrote to refunds@shop.example)",
    ],
)
def test_questions_address_changes_and_thanks_are_not_about_a_refund(body):
    assert read(body).reason == policy.NOT_REFUND


# --- amount, language, summary, quotes -----------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "cents", "said"),
    [
        ("please refund the $6.99 shipping", 699, "$6.99"),
        ("los gastos de envío (6,99 €)", 699, "6,99 €"),
        ("I want 7 dollars back", 700, "7 dollars"),
        ("seven dollars back please", 700, "seven dollars"),
        ("refund 1.299,00 € please", 129_900, "1.299,00 €"),
        ("it cost US$ 1,299.50", 129_950, "US$ 1,299.50"),
        ("I paid $49.99 for it. Please refund the $6.99 delivery.", 699, "$6.99"),
    ],
)
def test_an_amount_the_customer_names_is_read_in_cents_with_its_words(body, cents, said):
    reading = read(body)
    assert (reading.amount_cents, reading.quotes["amount"]) == (cents, said)


def test_no_amount_is_none():
    assert read("order 1042 was late").amount_cents is None


@pytest.mark.parametrize(
    ("body", "language"),
    [
        ("Hi, my order came late, can I get the fee back? Thanks", "en"),
        ("Hola, mi pedido llegó con retraso. Gracias", "es"),
        ("Bonjour, ma commande est arrivée en retard. Merci", "fr"),
        ("Hallo, meine Bestellung ist nicht angekommen. Danke", "de"),
        ("Olá, a minha encomenda ainda não chegou. Obrigado", "pt"),
        ("Ciao, il mio ordine non è arrivato. Grazie", "it"),
    ],
)
def test_the_language_is_read_by_its_small_words(body, language):
    assert read(body).language == language


def test_each_field_quotes_the_customers_own_words():
    reading = read(
        "Hi, my last order came almost a week late, can I get the $4.99 delivery charge back? "
        "It was #1042, thanks, Ana"
    )
    assert reading.quotes == {
        "orders": "#1042",
        "reason": "Hi, my last order came almost a week late, can I get the $4.99 delivery "
        "charge back?",
        "amount": "$4.99",
        "language": "hi, my, can, i, the",
    }
    assert reading.summary == (
        "Late delivery, order 1042: Hi, my last order came almost a week late, can I get the "
        "$4.99 delivery charge back?"
    )
    assert reading.read_by == "rules" and reading.fallback == ""


def test_the_summary_is_one_line_and_skips_greetings_and_separators():
    reading = read(FORWARD.replace("see below. it never came.", "Hello,"), subject="Fwd: hi")
    assert "\n" not in reading.summary
    assert (
        reading.summary
        == "Not about a refund, order 1088: Thanks for your purchase! Order number: 1088"
    )


def test_a_long_sentence_is_cut_to_one_line_of_at_most_200_characters():
    reading = read("My order was late " + "and very annoying " * 30 + ".")
    assert len(reading.summary) <= 200 and reading.summary.endswith("…")


def test_the_same_message_is_always_read_the_same():
    assert read(REPLY) == read(REPLY)


def test_an_empty_message_is_read_as_nothing_to_refund():
    reading = read("")
    assert (reading.reason, reading.orders, reading.amount_cents) == (policy.NOT_REFUND, [], None)


@pytest.mark.parametrize("body", ["1," * 30_000, "+1 " * 30_000, "€1" * 30_000, "order " * 12_000])
def test_a_long_hostile_message_is_read_in_bounded_time(body):
    # "1,1,1,…" took 89 s before the number patterns were bounded and the rules read only the
    # top of a long message; the bound here is loose for a shared 2-core machine.
    started = time.perf_counter()
    reading = read(body, subject=body[:3000])
    assert time.perf_counter() - started < 5
    assert reading.reason in policy.REASONS


# --- kinds the own set missed (issue 33), in several languages, not its own sentences -----------
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("It came much later than promised, order 1042.", policy.LATE_DELIVERY),
        ("The shipping was painfully slow, nearly three weeks.", policy.LATE_DELIVERY),
        ("Llegó mucho más tarde de lo prometido.", policy.LATE_DELIVERY),
        ("La livraison a été très lente, commande 1042.", policy.LATE_DELIVERY),
        ("Die Lieferung war extrem langsam.", policy.LATE_DELIVERY),
        ("Chegou mais tarde do que o previsto.", policy.LATE_DELIVERY),
        ("La spedizione è stata lentissima.", policy.LATE_DELIVERY),
        ("Tracking claims the box was delivered, yet nothing is at my door.", policy.NOT_RECEIVED),
        ("La web dice que fue entregado, pero no tengo nada.", policy.NOT_RECEIVED),
        ("Le suivi indique livré, mais je n'ai rien.", policy.NOT_RECEIVED),
        ("Die Sendung wurde angeblich zugestellt.", policy.NOT_RECEIVED),
        ("O site diz que foi entregue, mas não recebi nada.", policy.NOT_RECEIVED),
        ("Risulta consegnato, ma non ho niente.", policy.NOT_RECEIVED),
        ("Courier: the parcel was returned to sender after two attempts.", policy.NOT_RECEIVED),
        ("No pudimos entregar su paquete.", policy.NOT_RECEIVED),
        ("Got somebody else's parcel in my box.", policy.WRONG_ITEM),
        ("Me llegó el paquete de otra persona.", policy.WRONG_ITEM),
        ("J'ai reçu la commande de quelqu'un d'autre.", policy.WRONG_ITEM),
        ("Ich habe statt meiner Bestellung etwas anderes bekommen.", policy.WRONG_ITEM),
        ("Recebi a encomenda de outra pessoa.", policy.WRONG_ITEM),
        ("Mi è arrivato il pacco di un altro cliente.", policy.WRONG_ITEM),
    ],
)
def test_what_the_own_set_missed_is_read_by_kind_in_every_language(body, reason):
    assert read(body).reason == reason


def test_the_typo_ordr_still_leads_to_its_number():
    assert read("ordr 2051 came broken").orders == ["2051"]
