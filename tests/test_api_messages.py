"""POST /api/messages/: a helpdesk hands in a customer's message with an Idempotency-Key; the
intake takes it from there. Bad input is a 4xx in the API's one error shape and stores nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from api.models import ApiToken
from intake.models import Message
from refunds import enqueue

URL = "/api/messages/"
GOOD = {
    "sender": "ana@example.com",
    "sender_name": "Ana Souza",
    "subject": "Late parcel",
    "body": "Hi, my order #1042 came a week late, can I have the delivery charge back?",
}


@pytest.fixture
def woken(monkeypatch) -> list[int]:
    ids: list[int] = []
    monkeypatch.setattr(enqueue, "send", lambda name, pk: ids.append(pk) or True)
    return ids


@pytest.fixture
def api(agent) -> Client:
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(agent)[1]}"})


@pytest.fixture
def post(django_capture_on_commit_callbacks):
    def send(client: Client, body, key: str | None = "hd-1", **headers):
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        if key is not None:
            headers["Idempotency-Key"] = key
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(URL, data=data, content_type="application/json", headers=headers)

    return send


def refused(response, status: int, words: str) -> None:
    assert response.status_code == status, response.content
    answer = response.json()
    assert answer["status"] == status and words in answer["error"], answer
    assert Message.objects.count() == 0


def test_a_message_is_received_and_its_intake_starts(api, post, woken):
    response = post(api, GOOD)
    assert response.status_code == 202
    message = Message.objects.get()
    assert response.json() == {
        "id": message.pk,
        "status": "received",
        "received_at": response.json()["received_at"],
        "ticket": None,
    }
    assert message.channel == "api" and message.key.startswith("api:")
    assert message.sender == "ana@example.com" and "#1042" in message.body
    assert json.loads(message.raw) == GOOD and woken == [message.pk]


def test_the_same_message_posted_twice_with_its_key_is_one_message(api, post, woken):
    first = post(api, GOOD)
    again = post(api, GOOD)
    assert again.status_code == 202 and again.json() == first.json()
    assert Message.objects.count() == 1 and len(woken) == 1


def test_the_same_key_with_another_body_is_refused(api, post, woken):
    post(api, GOOD)
    response = post(api, {**GOOD, "body": "something else entirely"})
    assert response.status_code == 422 and "different request body" in response.json()["error"]
    assert Message.objects.count() == 1


def test_a_message_without_an_idempotency_key_is_refused(api, post, woken):
    refused(post(api, GOOD, key=None), 400, "needs an Idempotency-Key header")


def test_an_empty_body_is_refused(api, post, woken):
    refused(post(api, {**GOOD, "body": "  "}), 400, "The message has no text.")


def test_a_sender_that_is_not_an_address_is_refused(api, post, woken):
    refused(post(api, {**GOOD, "sender": "Ana"}), 400, "'Ana' is not an email address")


def test_a_message_over_the_limit_is_refused(api, post, woken, settings):
    settings.INTAKE_MAX_CHARS = 500
    refused(post(api, {**GOOD, "body": "x" * 501}), 400, "at most 500 are taken")


def test_a_request_over_the_apis_size_limit_is_refused(api, post, woken, settings):
    settings.API_MAX_BODY_BYTES = 1024
    refused(post(api, {**GOOD, "body": "x" * 2000}), 413, "")


def test_a_body_that_is_not_utf8_is_refused(api, post, woken):
    refused(post(api, b'{"sender": "ana@example.com", "body": "caf\xe9"}'), 400, "")


def test_an_empty_request_is_refused(api, post, woken):
    refused(post(api, b""), 400, "empty")


def test_unknown_fields_are_refused(api, post, woken):
    refused(post(api, {**GOOD, "order": "1042"}), 400, "Unknown field(s): order")


@pytest.mark.parametrize(
    "stamp", ["0001-01-01T00:00:00Z", "1999-12-31T23:59:59Z", "2999-01-01T00:00:00Z"]
)
def test_a_received_at_not_in_our_times_is_refused_in_words_naming_it(api, post, woken, stamp):
    response = post(api, {**GOOD, "received_at": stamp})
    refused(response, 422, "is not when a customer wrote: it must be from 2000-01-01 to a day")
    assert response.json()["error"].startswith(f"received_at {stamp[:10]}")


def test_a_received_at_given_as_a_number_is_refused_not_read_as_a_unix_time(api, post, woken):
    refused(post(api, {**GOOD, "received_at": 1_790_000_000}), 400, "received_at: must be a time")


def test_a_received_at_of_an_hour_ago_is_taken(api, post, woken):
    hour_ago = timezone.now() - timedelta(hours=1)
    assert post(api, {**GOOD, "received_at": hour_ago.isoformat()}).status_code == 202
    assert Message.objects.get().received_at == hour_ago


def test_a_user_who_may_not_open_tickets_may_not_hand_in_messages(post, woken, db):
    from django.contrib.auth.models import User

    nobody = User.objects.create_user("nobody")
    client = Client(headers={"Authorization": f"Bearer {ApiToken.issue(nobody)[1]}"})
    refused(post(client, GOOD), 403, "")


def test_without_a_token_it_is_401(post, woken, db):
    refused(post(Client(), GOOD), 401, "")


def test_it_is_in_the_schema(client, db):
    schema = client.get("/api/schema/", headers={"Accept": "application/json"})
    assert "/api/messages/" in schema.content.decode()


def test_the_schema_says_received_at_is_from_2000(client, db):
    schema = client.get("/api/schema/", headers={"Accept": "application/json"}).json()
    received_at = schema["components"]["schemas"]["MessageInRequest"]["properties"]["received_at"]
    assert received_at["format"] == "date-time" and received_at["pattern"] == "^2[0-9]{3}-"
