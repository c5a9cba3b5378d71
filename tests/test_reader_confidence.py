"""The reader says how sure it is and why not (issues 33, 47): the classifier's calibrated
probability with its two likeliest readings, the rules' doubts on the kinds of miss measured on
unseen mail (lateness told by two dates or days, order numbers in words or digits apart, numbers
in quoted older messages, "order" far from its number), the model's own confidence through the
LangChain seam, and REFUNDS_READER_MIN_CONFIDENCE, below which a message goes to "Needs sorting"
with what was unsure instead of opening a review on a guess."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from intake.models import Message
from intake.reader import default, model
from intake.reader.dates import late_by_dates
from intake.reader.text import fold
from refunds import enqueue, policy
from refunds.models import Ticket
from tests.conftest import make_order
from tests.test_refund_status_answer import receive as received
from tests.test_settings import manage_check


def read(body: str, subject: str = ""):
    return default.read(sender="ana@example.com", subject=subject, body=body)


# --- lateness told by two dates or days --------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        "Order 1042 was due on the 3rd and got here on the 11th.",
        "Order 1042 was meant to arrive Monday, it turned up Friday.",
        "Order 1042 was expected on Wednesday; the courier brought it the following Monday.",
        "El pedido 1042 tenía que llegar el día 3 y llegó el 11.",
        "Bestellung 1042 sollte am Dienstag kommen, gekommen ist sie am Samstag.",
        "Ma commande 1042 devait arriver le 3, elle est arrivée le 11.",
        "A encomenda 1042 era para chegar dia 3 e chegou dia 11.",
        "L'ordine 1042 doveva arrivare il 3 ed è arrivato l'11.",
    ],
)
def test_lateness_told_only_by_two_days_is_a_late_delivery_quoting_the_two(body):
    reading = read(body)
    assert (reading.reason, reading.orders) == (policy.LATE_DELIVERY, ["1042"])
    assert reading.confidence >= default.DATES_SURE
    assert reading.quotes["reason"] == late_by_dates(fold(body))[1]  # the two days' words


@pytest.mark.parametrize(
    "body",
    [
        "Order 1042 was due on the 11th and came on the 9th, thank you!",
        "El pedido 1042 tenía que llegar el lunes y llegó el lunes, gracias.",
    ],
)
def test_two_days_that_say_it_came_in_time_are_no_lateness(body):
    assert read(body).reason != policy.LATE_DELIVERY


# --- order numbers in words, or digits apart ---------------------------------------------------
@pytest.mark.parametrize(
    ("body", "number"),
    [
        ("my order one oh five two came late", "1052"),
        ("pedido uno cero cinco dos, llegó tarde", "1052"),
        ("Bestellung eins null fünf zwei kam zu spät", "1052"),
        ("order 10 52 came late", "1052"),
        ("Order # 1 0 5 2 arrived broken", "1052"),
    ],
)
def test_an_order_number_in_words_or_digits_apart_is_read_and_said_as_unsure(body, number):
    reading = read(body)
    assert reading.orders == [number]
    (doubt,) = [u for u in reading.unsure if u.startswith("the order number")]
    assert doubt.startswith("the order number was read from words or digits set apart")


def test_a_number_after_a_plain_order_number_is_not_joined_to_it():
    assert read("Order 1052, 2 of the glasses were broken.").orders == ["1052"]
    assert read("order 1052 2 items came broken").orders == ["1052"]


# --- "order" far from its number ---------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        "The order I placed for my mum's birthday last month, 1052, arrived a week late.",
        "El pedido que hice para el cumpleaños de mi madre, el 1052, llegó tarde.",
        "Die Bestellung für den Geburtstag meiner Mutter, Nummer 1052, kam zu spät.",
    ],
)
def test_a_number_a_few_words_after_order_is_read_and_said_as_unsure(body):
    reading = read(body)
    assert reading.orders == ["1052"]
    assert reading.unsure[-1].startswith('the order number stands apart from "order"')
    assert reading.confidence <= 0.75


@pytest.mark.parametrize(
    "body",
    [
        "The order was placed in 2024 and it came late.",
        "the order came late, it weighed 250 g",
        "The order came late. Call my phone 555-123-4567.",
        "order came late, the tracking number is 94001118",
    ],
)
def test_a_year_an_amount_a_phone_or_a_tracking_number_after_order_is_not_taken(body):
    assert read(body).orders == []


def test_a_number_far_from_order_is_not_taken_when_one_is_written_plainly():
    assert read("Order 1052 came late. My customer number is 88123.").orders == ["1052"]


def test_only_the_first_number_far_from_order_is_taken():
    body = "The order I placed for my mum, 1052, came late; the # on the slip was 7781."
    assert read(body).orders == ["1052"]


# --- quoted older messages -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "opener",
    [
        "On Tue, Mar 4, 2025 at 9:15 AM Shop Customer Care <\ncare@shop.example> wrote:",
        "El mar, 4 mar 2025 a las 9:15, Atención al cliente <\natencion@shop.example> escribió:",
        "Am Di., 4. März 2025 um 09:15 Uhr schrieb Kundenservice <\nservice@shop.example>:",
    ],
)
def test_a_quote_opener_wrapped_over_two_lines_still_ends_the_customers_words(opener):
    body = f"Order 3307 arrived cracked.\n\n{opener}\n\nYour order 3300 has shipped!"
    assert read(body).orders == ["3307"]


def test_an_order_only_in_the_quoted_part_is_taken_and_said_as_unsure():
    reading = read(
        "It finally got here today, a week late.\n\nOn Fri, 7 Mar 2025, Shop <o@shop.example>"
        " wrote:\n> Your order 6001 has been dispatched."
    )
    assert reading.orders == ["6001"]
    assert reading.unsure[-1] == (
        "the order number is only in the quoted or forwarded part (order 6001)"
    )


# --- what lowers confidence ----------------------------------------------------------------------
def test_a_plain_message_is_read_sure():
    reading = read("My order 1042 came a week late, can I have the delivery fee back?")
    assert reading.confidence >= 0.9 and reading.unsure == []


def test_a_list_of_orders_is_sure_and_orders_in_separate_places_are_not():
    assert read("my orders 1042, 1044 and 1047 were all late").unsure == []
    reading = read("Order 1042 was late. I also want to say that the lamp from #1044 is lovely.")
    assert reading.unsure[-1] == "several order numbers in separate places (1042, 1044)"
    assert reading.confidence <= 0.65


def test_a_reading_the_classifier_is_unsure_of_names_its_two_likeliest_with_their_odds(settings):
    settings.REFUNDS_READER_MIN_CONFIDENCE = 0.99
    (first, p1), (second, p2), *_ = default.classifier().ranked("Order 1042.")

    reading = read("Order 1042.")

    assert (reading.reason, reading.confidence) == (first, round(p1, 2))
    assert reading.unsure[0] == (
        f"read as {policy.REASONS[first].lower()} ({round(p1 * 100)}%) or as "
        f"{policy.REASONS[second].lower()} ({round(p2 * 100)}%)"
    )


# --- the model's confidence, through the LangChain seam -------------------------------------------
GOOD = {
    "reason": "late_delivery",
    "orders": ["1042"],
    "amount_cents": None,
    "language": "en",
    "summary": "Order 1042 came late.",
    "quotes": {},
}
BODY = "The order for my mum, 1042 I think, or maybe 1044, came a week late."


def fake(answer: dict) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=json.dumps(answer))]))


def model_read(chat, body: str = BODY):
    return model.read_with(
        chat, spec="fake:x", sender="ana@example.com", subject="", body=body, timeout=5, attempts=1
    )


def test_a_models_confidence_and_what_it_was_unsure_of_are_the_readings():
    unsure = ["two order numbers, 1042 and 1044", "'I think'"]
    reading = model_read(fake({**GOOD, "confidence": 0.3, "unsure": unsure}))
    assert (reading.read_by, reading.confidence, reading.unsure) == ("fake:x", 0.3, unsure)


def test_a_model_that_says_nothing_of_its_confidence_is_taken_as_sure():
    reading = model_read(fake(GOOD))
    assert (reading.read_by, reading.confidence, reading.unsure) == ("fake:x", 1.0, [])


def test_a_confidence_out_of_range_falls_back_to_the_trained_reader_with_its_confidence():
    reading = model_read(fake({**GOOD, "confidence": 1.5}))
    assert reading.read_by == "classifier" and "confidence" in reading.fallback
    assert reading.confidence == read(BODY).confidence


# --- below the threshold: "Needs sorting" with what was unsure ------------------------------------
@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)


def receive(body: str) -> Message:
    return received(body, key="m1", subject="Refund")


FAR = "The order I placed for my mum's birthday last month, 1042, arrived a week late."


def test_a_reading_below_the_threshold_goes_to_sorting_saying_what_was_unsure(
    transactional_db, settings, client, agent
):
    make_order("1042")
    settings.REFUNDS_READER_MIN_CONFIDENCE = 0.8
    message = receive(FAR)
    assert message.status == Message.Status.NEEDS_SORTING
    assert Ticket.objects.count() == 0
    assert message.sorting_reason.startswith(
        "The reader was unsure (confidence 75%, below 80%; read by classifier): the order number "
        'stands apart from "order" or "#" ("order I placed for my mum\'s birthday last month, '
        '1042"). It read late delivery, order 1042.'
    )
    client.force_login(agent)
    page = client.get(reverse("reviews:message", args=[message.pk])).content.decode()
    assert "The reader was unsure (confidence 75%" in page
    sorting_page = client.get(reverse("reviews:needs_sorting")).content.decode()
    assert "<strong>Unsure (75% sure):</strong> the order number stands apart from" in (
        sorting_page.replace("&quot;", '"').replace("&#x27;", "'")
    )


def test_a_reading_at_or_above_the_threshold_opens_its_ticket(transactional_db, settings):
    make_order("1042")
    settings.REFUNDS_READER_MIN_CONFIDENCE = 0.75
    message = receive(FAR)
    assert message.status == Message.Status.OPENED
    assert message.ticket.reading["confidence"] == 0.75


def test_a_model_unsure_of_its_reading_sends_the_message_to_sorting(
    transactional_db, settings, monkeypatch
):
    make_order("1042")
    settings.REFUNDS_MODEL = "fake:x"
    answer = {**GOOD, "confidence": 0.3, "unsure": ["two order numbers, 1042 and 1044"]}
    monkeypatch.setattr(model, "build", lambda spec: fake(answer))
    message = receive(BODY)
    assert message.status == Message.Status.NEEDS_SORTING
    assert "(confidence 30%, below 50%; read by fake:x): two order numbers, 1042 and 1044" in (
        message.sorting_reason
    )


@pytest.mark.parametrize("value", ["1.5", "-0.1", "sure", "nan"])
def test_a_bad_threshold_stops_the_process_naming_it(tmp_path, value):
    result = manage_check(tmp_path, REFUNDS_READER_MIN_CONFIDENCE=value)
    assert result.returncode != 0
    assert result.stderr.startswith("Refund Desk cannot start: REFUNDS_READER_MIN_CONFIDENCE="), (
        result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_good_threshold_starts(tmp_path):
    assert manage_check(tmp_path, REFUNDS_READER_MIN_CONFIDENCE="0.7").returncode == 0
