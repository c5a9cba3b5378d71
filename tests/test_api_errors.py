"""Every bad request the API can get answers JSON in one shape, with a 4xx, and opens nothing:
malformed JSON of every kind, the wrong media type, a missing slash, a body too large, an
unknown URL, a wrong method, too many requests. A bug answers 500 in the same shape."""

from __future__ import annotations

import pytest
from django.test import Client

from api.models import ApiToken, RateCounter
from refunds.models import Ticket

URL = "/api/tickets/"
SHAPE = {"status", "code", "error"}


@pytest.fixture
def auth(agent) -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiToken.issue(agent)[1]}"}


@pytest.fixture
def api(auth) -> Client:
    return Client(headers=auth)


def assert_error(response, status: int, code: str = "") -> dict:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert SHAPE <= set(body), body
    assert body["status"] == status
    if code:
        assert body["code"] == code, body
    return body


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"order_number": "\\ud800"}', "lone surrogate"),  # valid JSON, not storable text
        ('{"order_number": "1042", "note": "\\udfff x"}', "lone surrogate"),
        ('{"order_number": ' + "9" * 5000 + "}", "too long"),
        ('{"order_number": 1e999}', "out of range"),
        ('{"order_number": NaN}', "not valid JSON"),
        ("[" * 5000 + "]" * 5000, "nested deeper"),
        ('{"a":' * 100_000 + "1" + "}" * 100_000, "too large"),  # also over the size limit
        (
            '{"order_number": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": {"j": {"k": '
            '{"l": {"m": {"n": {"o": {"p": {"q": {"r": {"s": {"t": {"u": 1}}}}}}}}}}}}}}}}}}}}}}',
            "nested deeper",
        ),
        (b"\xff\xfe\x00{", "not UTF-8"),
        ('{"order_number": "1042",}', "not valid JSON"),
        ("", "empty"),
    ],
)
def test_malformed_json_of_every_kind_answers_a_4xx_json_error(api, late_order, raw, says):
    response = api.post(URL, data=raw, content_type="application/json")
    assert 400 <= response.status_code < 500
    body = assert_error(response, response.status_code)
    assert says in body["error"], body
    assert Ticket.objects.count() == 0


def test_a_form_encoded_body_is_refused_with_415(api, late_order):
    response = api.post(URL, data={"order_number": "1042"})  # multipart, as a browser form
    assert_error(response, 415, "unsupported_media_type")
    response = api.post(
        URL, data="order_number=1042", content_type="application/x-www-form-urlencoded"
    )
    assert_error(response, 415, "unsupported_media_type")
    assert Ticket.objects.count() == 0


def test_a_post_without_the_trailing_slash_opens_the_ticket(api, late_order, settings):
    settings.DEBUG = True  # where APPEND_SLASH used to raise a 500 debug page
    response = api.post(
        "/api/tickets", data='{"order_number": "1042"}', content_type="application/json"
    )
    assert response.status_code == 201, response.content[:300]
    assert api.get(f"/api/tickets/{response.json()['id']}").status_code == 200


def test_a_body_over_the_limit_answers_413(api, late_order, settings):
    settings.API_MAX_BODY_BYTES = 2048
    note = "x" * 3000
    response = api.post(
        URL, data=f'{{"order_number": "1042", "note": "{note}"}}', content_type="application/json"
    )
    assert_error(response, 413, "payload_too_large")


def test_an_unknown_api_url_answers_a_json_404(api):
    assert_error(api.get("/api/nothing/here/"), 404, "not_found")
    assert_error(api.get("/api/tickets/abc/"), 404, "not_found")


def test_a_wrong_method_answers_a_json_405(api, late_order):
    ticket = Ticket.objects.create(thread_id="t", order=late_order)
    response = api.delete(f"{URL}{ticket.pk}/")
    assert_error(response, 405, "method_not_allowed")
    assert "GET" in response["Allow"]


def test_no_credentials_answer_a_json_401(client, db):
    assert_error(client.get(URL), 401, "not_authenticated")


def test_a_csrf_failure_answers_a_json_403(agent, late_order):
    client = Client(enforce_csrf_checks=True)
    client.force_login(agent)
    body = assert_error(client.post(URL, data="{}", content_type="application/json"), 403)
    assert "CSRF" in body["error"]


def test_a_validation_error_names_the_field(api, late_order):
    body = assert_error(api.post(URL, data="{}", content_type="application/json"), 400, "invalid")
    assert body["error"] == "Missing field: order_number (or order_numbers, a list)."
    assert "order_number" in body["fields"]


def test_an_idempotency_conflict_answers_422_in_the_same_shape(api, late_order, on_time_order):
    headers = {"Idempotency-Key": "k-1"}
    api.post(URL, data='{"order_number": "1042"}', content_type="application/json", headers=headers)
    again = api.post(
        URL, data='{"order_number": "1043"}', content_type="application/json", headers=headers
    )
    assert_error(again, 422, "unprocessable")


def test_an_open_ticket_answers_409_with_it(api, late_order):
    first = api.post(URL, data='{"order_number": "1042"}', content_type="application/json")
    again = api.post(URL, data='{"order_number": "1042"}', content_type="application/json")
    body = assert_error(again, 409, "conflict")
    assert body["ticket"]["id"] == first.json()["id"]


def test_a_bug_answers_a_json_500_without_details(auth, late_order, monkeypatch, settings):
    settings.DEBUG = True  # not even the debug page: the API answers JSON

    def broken(**kwargs):
        raise RuntimeError("postgres://refunds:hunter22@db/refunds is gone")

    monkeypatch.setattr("refunds.services.ticket_open", broken)
    client = Client(raise_request_exception=False, headers=auth)
    response = client.post(URL, data='{"order_number": "1042"}', content_type="application/json")
    body = assert_error(response, 500, "server_error")
    assert b"hunter22" not in response.content and b"Traceback" not in response.content
    assert body["error"] == "The server failed to answer this request; it was logged."


# --- rate limits ---------------------------------------------------------------------------------
def test_a_token_past_its_rate_answers_429_with_retry_after(api, late_order, settings):
    settings.API_RATE_PER_TOKEN = "3/minute"
    codes = [api.get(URL).status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    response = api.get(URL)
    body = assert_error(response, 429, "rate_limited")
    assert 1 <= int(response["Retry-After"]) <= 60
    assert "try again in" in body["error"]


def test_another_token_has_its_own_allowance(api, manager, late_order, settings):
    settings.API_RATE_PER_TOKEN = "2/minute"
    other = Client(headers={"Authorization": f"Bearer {ApiToken.issue(manager)[1]}"})
    assert [api.get(URL).status_code for _ in range(3)] == [200, 200, 429]
    assert other.get(URL).status_code == 200


def test_one_address_past_its_rate_answers_429_even_with_bad_tokens(db, settings):
    settings.API_RATE_PER_IP = "5/minute"
    client = Client(headers={"Authorization": "Bearer not-a-key"})
    codes = [client.get(URL).status_code for _ in range(7)]
    assert codes == [401] * 5 + [429] * 2  # 200 bad tokens are no longer answered one by one
    assert int(client.get(URL)["Retry-After"]) >= 1
    other = Client(REMOTE_ADDR="10.9.8.7", headers={"Authorization": "Bearer not-a-key"})
    assert other.get(URL).status_code == 401  # another address is not limited by it


def test_the_counter_window_resets(db):
    from api import limits

    rate = limits.Rate.parse("2/minute")
    assert [limits.hit("k", rate, now=120.0).allowed for _ in range(3)] == [True, True, False]
    assert limits.hit("k", rate, now=181.0).allowed  # the next minute
    assert limits.hit("k", rate, now=179.5).retry_after == 1
    assert RateCounter.objects.filter(key="k").count() >= 1
