"""The default reader reads what customers write: order numbers however they are written and
never a date, phone number, postcode, amount, year or tracking number; the customer's newest
words before what they quote or forward; why they write (the trained classifier) in six
languages; an amount; the language; a summary; and the customer's own words behind each field."""

from __future__ import annotations

import time

import pytest

from intake.reader import default
from refunds import policy


def read(body: str, subject: str = ""):
    return default.read(sender="ana@example.com", subject=subject, body=body)


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


OUTLOOK_FORWARD = (
    "Forwarding my wife's email.\n\n-----Original Message-----\nFrom: Layla <l@example.com>\n"
    "Sent: Thursday, March 6, 2025 11:03 AM\nSubject: complaint\n\n"
    "The plates in order 1091 arrived chipped and two were broken."
)


def test_an_outlook_forwards_order_is_read_below_its_header_block():
    assert read(OUTLOOK_FORWARD).orders == ["1091"]


# --- why the customer writes: the classifier ---------------------------------------------------
# Messages written for the rules reader's tests (issues 12, 33, 41), none in the classifier's
# data: each reason in six languages, a part missing, typos, a negation, money back for no reason,
# questions and thanks, where a refund is and the near misses of that, two days that say it has
# not come. The classifier is measured on sets (tests/test_eval_intake.py, its floors); these
# hold it to plain messages, with the misreads it keeps named in MISREAD.
CLEAR = [
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
    ("it was dammaged when it arived", policy.DAMAGED),
    ("the lamp is damged", policy.DAMAGED),
    ("my order was delayd by a week", policy.LATE_DELIVERY),
    ("refnd plz", policy.OTHER_REQUEST),
    ("can i get a refudn", policy.OTHER_REQUEST),
    ("The box arrived but the charger was missing.", policy.NOT_RECEIVED),
    ("The cable is not in the box.", policy.NOT_RECEIVED),
    ("It came without the charger.", policy.NOT_RECEIVED),
    ("Mi pedido llegó pero faltaba el cargador.", policy.NOT_RECEIVED),
    ("Dans ma commande il manquait le chargeur.", policy.NOT_RECEIVED),
    ("In meiner Bestellung fehlte das Ladegerät.", policy.NOT_RECEIVED),
    ("Na minha encomenda faltava o carregador.", policy.NOT_RECEIVED),
    ("Nel mio ordine mancava il caricabatterie.", policy.NOT_RECEIVED),
    ("The box was empty.", policy.NOT_RECEIVED),
    ("My parcel arrived today but the box was completely empty.", policy.NOT_RECEIVED),
    ("La caja llegó vacía.", policy.NOT_RECEIVED),
    ("Le colis est arrivé vide.", policy.NOT_RECEIVED),
    ("Das Paket war leer.", policy.NOT_RECEIVED),
    ("A caixa chegou vazia.", policy.NOT_RECEIVED),
    ("Il pacco è arrivato vuoto.", policy.NOT_RECEIVED),
    (
        "Nothing is missing, but can you change the delivery address for order 1083?",
        policy.NOT_REFUND,
    ),
    ("Es fehlt nichts, danke! Können Sie die Adresse ändern?", policy.NOT_REFUND),
    ("Non manca niente, grazie! Potete cambiare l'indirizzo?", policy.NOT_REFUND),
    ("Please cancel order 1079, I ordered it by mistake.", policy.OTHER_REQUEST),
    ("I was charged twice for order 1080.", policy.OTHER_REQUEST),
    ("Can I return the jacket for a full refund?", policy.OTHER_REQUEST),
    ("Could I please get a refund for my last order?", policy.OTHER_REQUEST),
    ("Do you have the green raincoat in size S back in stock?", policy.NOT_REFUND),
    ("Can you change the delivery address for order 1083?", policy.NOT_REFUND),
    ("Got my refund, thanks a lot!", policy.NOT_REFUND),
    ("Merci beaucoup pour le remboursement rapide !", policy.NOT_REFUND),
    ("Just wanted to say thanks, great service!", policy.NOT_REFUND),
    ("Buenas tardes, ¿tienen la chaqueta roja en talla 38?", policy.NOT_REFUND),
    (
        "Dear Refund Desk, do you have the blue one in stock? (I wrote to refunds@shop.example)",
        policy.NOT_REFUND,
    ),
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
    ("It was not damaged, just late by 4 days.", policy.LATE_DELIVERY),
    ("It wasn't late, it was on time, just broken.", policy.DAMAGED),
    ("Order 1042 was due on the 3rd and still has not arrived on the 11th.", policy.NOT_RECEIVED),
    (
        "Bestellung 1042 sollte am 3. kommen, ist aber nicht gekommen, auch nicht am 11.",
        policy.NOT_RECEIVED,
    ),
    (OUTLOOK_FORWARD, policy.DAMAGED),
    # where is a refund asked for, in other words, and near misses (issue 41)
    ("Hi, where is my refund for order 1042? It has been two weeks.", policy.REFUND_STATUS),
    ("I still haven't received my refund, can you check?", policy.REFUND_STATUS),
    ("¿Dónde está mi reembolso del pedido 1042?", policy.REFUND_STATUS),
    ("Ich habe meine Erstattung noch nicht erhalten.", policy.REFUND_STATUS),
    ("Où en est mon remboursement ?", policy.REFUND_STATUS),
    ("Ainda não recebi o reembolso.", policy.REFUND_STATUS),
    ("Non ho ancora ricevuto il rimborso.", policy.REFUND_STATUS),
    ("Any news about the refund for order 1042?", policy.REFUND_STATUS),
    ("Is my refund on its way? I asked for it on Friday.", policy.REFUND_STATUS),
    ("The refund for order 1042 still hasn't shown up.", policy.REFUND_STATUS),
    ("When can I expect my money back?", policy.REFUND_STATUS),
    ("I'm still waiting on the £4.50 credit.", policy.REFUND_STATUS),
    ("You told me the fee would be refunded within a week. It's been three.", policy.REFUND_STATUS),
    ("¿Qué pasa con mi reembolso? Ya pasaron diez días.", policy.REFUND_STATUS),
    ("Me prometieron devolverme el envío y todavía no veo nada.", policy.REFUND_STATUS),
    ("Des nouvelles de mon remboursement ? Commande 1042.", policy.REFUND_STATUS),
    ("J'attends toujours le remboursement de la commande 1042.", policy.REFUND_STATUS),
    ("Wo bleibt mein Geld? Ich warte noch auf die Gutschrift.", policy.REFUND_STATUS),
    ("Die Rückerstattung für Bestellung 1042 ist noch nicht eingegangen.", policy.REFUND_STATUS),
    ("Quando vou receber o reembolso da encomenda 1042?", policy.REFUND_STATUS),
    ("Che fine ha fatto il mio rimborso?", policy.REFUND_STATUS),
    ("Order 1042 never arrived and I'd like my money back.", policy.NOT_RECEIVED),
    ("I want a refund, the parcel has not arrived.", policy.NOT_RECEIVED),
    ("You promised Tuesday. It's still not here. Refund please, order 1042.", policy.NOT_RECEIVED),
    ("I haven't received the item and I'd like a refund.", policy.NOT_RECEIVED),
    ("Please refund order 1042, I changed my mind.", policy.OTHER_REQUEST),
    ("Got my refund today, thanks a lot!", policy.NOT_REFUND),
    ("The refund for order 1042 went through this morning, thank you.", policy.NOT_REFUND),
    ("Ya me llegó el reembolso, gracias.", policy.NOT_REFUND),
    ("Il rimborso è arrivato, grazie mille.", policy.NOT_REFUND),
    ("What is your refund policy for gifts?", policy.NOT_REFUND),
    ("It turned up after all, no refund needed.", policy.NOT_REFUND),
]
MISREAD = {  # read otherwise by the shipped model; those less sure than 50% go to Needs sorting
    "The charger stopped working after one day.",
    "You sent me the wrong item!",
    "refnd plz",
    "It came without the charger.",
    "In meiner Bestellung fehlte das Ladegerät.",
    "La caja llegó vacía.",
    "Le colis est arrivé vide.",
    "Nothing is missing, but can you change the delivery address for order 1083?",
    "I was charged twice for order 1080.",
    "Got my refund, thanks a lot!",
    "Dear Refund Desk, do you have the blue one in stock? (I wrote to refunds@shop.example)",
    "Got somebody else's parcel in my box.",
    "It wasn't late, it was on time, just broken.",
    "Order 1042 was due on the 3rd and still has not arrived on the 11th.",
    "Bestellung 1042 sollte am 3. kommen, ist aber nicht gekommen, auch nicht am 11.",
    OUTLOOK_FORWARD,
    "I haven't received the item and I'd like a refund.",
    "Got my refund today, thanks a lot!",
    "The refund for order 1042 went through this morning, thank you.",
    "Ya me llegó el reembolso, gracias.",
    "What is your refund policy for gifts?",
    "It turned up after all, no refund needed.",
}


def test_plain_messages_in_six_languages_are_read_right_but_the_misreads_named():
    read_as = {body: read(body).reason for body, _ in CLEAR}
    misread = {body: read_as[body] for body, reason in CLEAR if read_as[body] != reason}
    assert set(misread) == MISREAD, misread


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
def test_the_language_is_read_by_linguas_models(body, language):
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
    }
    assert reading.summary == (
        "Late delivery, order 1042: Hi, my last order came almost a week late, can I get the "
        "$4.99 delivery charge back?"
    )
    assert reading.read_by == "classifier" and reading.fallback == ""


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


def test_the_typo_ordr_still_leads_to_its_number():
    assert read("ordr 2051 came broken").orders == ["2051"]


@pytest.mark.parametrize(
    "body",
    [
        "bought it by mistake, pls refund 2051",
        "OU EST MON REMBOURSEMENT 2051",
        "Reçu le vélo (2051), une pédale manque dans le carton.",
        "die Laufuhr 2051 zeigt nur ein schwarzes Display",
    ],
)
def test_a_number_standing_alone_is_the_order_said_as_unsure(body):
    reading = read(body)
    assert reading.orders == ["2051"]
    assert reading.unsure[-1] == 'the order number stands alone, with no word for it ("2051")'
    assert reading.confidence <= 0.75


def test_two_numbers_standing_alone_name_no_order_and_a_named_one_beats_one_alone():
    assert read("refund 2051 or was it 2052?").orders == []
    assert read("refund 2051 please, order 2060").orders == ["2060"]
