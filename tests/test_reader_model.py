"""The model reader, driven by LangChain's fake chat models at LangChain's own seam (a
BaseChatModel handed to `model.read_with`), never a network: a good answer is used and says
which model read it; every failure (malformed JSON, a timeout, a refusal, an answer out of the
schema, an order the message does not name, a provider that is not installed) falls back to the
trained reader with the reason in words a reviewer reads; transient failures are retried,
permanent ones are not. The model's API key is masked everywhere."""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any

import pytest
from django.test import Client
from django.urls import include, path
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

import intake.reader
from core.masking import mask
from intake.reader import default, model
from refunds import policy
from tests.test_settings import manage_check

SPEC = "fake:reader-test"
SUBJECT = "late order"
BODY = "hi, my last order came almost a week late, can I get the $6.99 delivery back? it was #1042"
GOOD = {
    "reason": "late_delivery",
    "orders": ["1042"],
    "amount_cents": 699,
    "language": "en",
    "summary": "Order 1042 came a week late; the customer asks for the $6.99 delivery back.",
    "quotes": {"reason": "came almost a week late", "orders": "#1042", "amount": "$6.99"},
}


def answering(*contents: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(AIMessage(content=c) for c in contents))


def read_with(chat: BaseChatModel, *, body: str = BODY, attempts: int = 2, timeout: float = 5):
    return model.read_with(
        chat,
        spec=SPEC,
        sender="ana@example.com",
        subject=SUBJECT,
        body=body,
        timeout=timeout,
        attempts=attempts,
        backoff=0,
    )


def by_default(body: str = BODY) -> dict[str, Any]:
    reading = default.read(sender="ana@example.com", subject=SUBJECT, body=body).as_json()
    return {k: v for k, v in reading.items() if k != "fallback"}


def assert_fell_back(reading, words: str) -> None:
    assert reading.fallback == f"{words}; read by classifier"
    assert reading.read_by == "classifier"
    assert {k: v for k, v in reading.as_json().items() if k != "fallback"} == by_default()


class Scripted(BaseChatModel):
    """A chat model that plays a script: an exception is raised, a string is answered. It
    counts the calls it took."""

    script: list[Any]
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs):
        step = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if isinstance(step, BaseException):
            raise step
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=step))])


class Stalled(BaseChatModel):
    """A provider that accepts the call and never answers (until the test ends)."""

    release: threading.Event
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "stalled"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs):
        self.calls += 1
        self.release.wait(30)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="{}"))])


class WithTools(GenericFakeChatModel):
    """A fake that supports tool calling, so with_structured_output takes its tool path."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


# errors named as providers' SDKs name them
class RateLimitError(Exception):
    status_code = 429


class APIConnectionError(Exception):
    pass


class AuthenticationError(Exception):
    status_code = 401


# --- a good answer -----------------------------------------------------------------------------
def test_a_good_answer_is_the_reading_and_names_the_model_that_read_it():
    reading = read_with(answering(json.dumps(GOOD)))

    assert reading.reason == policy.LATE_DELIVERY
    assert (reading.orders, reading.amount_cents, reading.language) == (["1042"], 699, "en")
    assert reading.summary == GOOD["summary"]
    assert reading.quotes == GOOD["quotes"]
    assert (reading.read_by, reading.fallback) == (SPEC, "")


def test_an_answer_in_a_json_code_fence_is_read_too():
    reading = read_with(answering(f"```json\n{json.dumps(GOOD)}\n```"))
    assert (reading.read_by, reading.orders) == (SPEC, ["1042"])


def test_a_model_with_tool_calling_is_asked_for_structured_output():
    call = {"name": "ModelReading", "args": GOOD, "id": "call-1", "type": "tool_call"}
    chat = WithTools(messages=iter([AIMessage(content="", tool_calls=[call])]))

    reading = read_with(chat)

    assert (reading.read_by, reading.reason, reading.orders) == (SPEC, "late_delivery", ["1042"])


def test_quotes_that_are_not_the_customers_words_are_dropped():
    answer = {**GOOD, "quotes": {"reason": "came almost a week late", "amount": "six dollars"}}
    assert read_with(answering(json.dumps(answer))).quotes == {"reason": "came almost a week late"}


# --- failures: each falls back to the trained reader and says why ------------------------------
def test_malformed_json_falls_back_to_the_trained_reader():
    reading = read_with(answering('{"reason": "late_delivery", "orders": ["1042"'))
    assert_fell_back(reading, "the model's answer was not valid JSON")


def test_an_answer_out_of_the_schema_falls_back_naming_the_field():
    answer = {**GOOD, "reason": "angry_customer"}
    reading = read_with(answering(json.dumps(answer)))
    assert reading.fallback.startswith(
        "the model's answer did not fit the reading's shape (reason: Input should be "
    )
    assert_fell_back(reading, reading.fallback.removesuffix("; read by classifier"))


def test_an_answer_with_a_key_the_schema_lacks_falls_back():
    reading = read_with(answering(json.dumps({**GOOD, "approve": True})))
    assert_fell_back(
        reading,
        "the model's answer did not fit the reading's shape (approve: Extra inputs are "
        "not permitted)",
    )


def test_an_answer_naming_an_order_the_message_does_not_is_not_trusted():
    answer = {**GOOD, "orders": ["1042", "2077"]}  # 2077: another customer's, or invented
    reading = read_with(answering(json.dumps(answer)))
    assert_fell_back(reading, "the model named order '2077', which is not in the message")
    assert "2077" not in reading.orders


def test_a_refusal_in_words_falls_back():
    reading = read_with(answering("I'm sorry, but I can't help with that request."))
    assert_fell_back(reading, "the model refused to read the message")


def test_a_refusal_the_provider_marks_falls_back_without_a_retry():
    refusal = AIMessage(content="", additional_kwargs={"refusal": "I can't assist with that."})
    chat = FakeMessagesListChatModel(responses=[refusal, AIMessage(content=json.dumps(GOOD))])
    reading = read_with(chat)
    assert_fell_back(reading, "the model refused to read the message")


def test_a_model_that_does_not_answer_in_time_falls_back_after_its_attempts():
    release = threading.Event()
    chat = Stalled(release=release)
    try:
        reading = read_with(chat, timeout=0.2, attempts=2)
    finally:
        release.set()
    assert_fell_back(reading, "the model did not answer within 0.2 s (2 attempts)")
    assert chat.calls == 2


def test_a_transient_error_is_retried_and_the_second_answer_used():
    chat = Scripted(script=[APIConnectionError("connection reset"), json.dumps(GOOD)])
    reading = read_with(chat, attempts=2)
    assert (reading.read_by, reading.fallback, chat.calls) == (SPEC, "", 2)


def test_a_rate_limit_is_retried_up_to_the_attempts_then_falls_back():
    chat = Scripted(script=[RateLimitError("slow down")])
    reading = read_with(chat, attempts=3)
    assert_fell_back(
        reading,
        "the model's provider is rate limiting us (RateLimitError: slow down) (3 attempts)",
    )
    assert chat.calls == 3


def test_a_permanent_error_is_not_retried():
    chat = Scripted(script=[AuthenticationError("invalid x-api-key"), json.dumps(GOOD)])
    reading = read_with(chat, attempts=3)
    assert_fell_back(reading, "the model failed (AuthenticationError: invalid x-api-key)")
    assert chat.calls == 1


def test_a_malformed_answer_is_not_retried():
    chat = Scripted(script=["not json at all", json.dumps(GOOD)])
    reading = read_with(chat, attempts=3)
    assert_fell_back(reading, "the model's answer was not valid JSON")
    assert chat.calls == 1


# --- configured through the settings ------------------------------------------------------------
def test_without_a_model_the_trained_reader_reads_and_no_fallback_is_shown(settings):
    settings.REFUNDS_MODEL = ""
    reading = intake.reader.read(sender="ana@example.com", subject=SUBJECT, body=BODY)
    assert (reading.read_by, reading.fallback) == ("classifier", "")


def test_a_configured_provider_that_is_not_installed_falls_back_at_once(settings):
    settings.REFUNDS_MODEL = "openai:gpt-4.1-mini"
    reading = intake.reader.read(sender="ana@example.com", subject=SUBJECT, body=BODY)
    assert_fell_back(
        reading,
        "the model openai:gpt-4.1-mini cannot be used here: its package langchain-openai is "
        "not installed",
    )


def test_a_provider_langchain_does_not_know_falls_back_saying_so(settings):
    settings.REFUNDS_MODEL = "nosuchprovider:model-1"
    reading = intake.reader.read(sender="ana@example.com", subject=SUBJECT, body=BODY)
    assert reading.fallback.startswith(
        "the model nosuchprovider:model-1 could not be set up (Unsupported provider="
    )
    assert reading.read_by == "classifier"


@pytest.mark.parametrize("spec", ["gpt4", "openai:", "openai: gpt-4", "Open AI:gpt-4", ":gpt-4"])
def test_a_malformed_model_spec_stops_the_process_naming_the_variable(tmp_path, spec):
    result = manage_check(tmp_path, REFUNDS_MODEL=spec)
    assert result.returncode != 0
    assert result.stderr.startswith(
        "Refund Desk cannot start: REFUNDS_MODEL must be provider:model"
    ), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"REFUNDS_MODEL_TIMEOUT": "0"},
            "REFUNDS_MODEL_TIMEOUT='0': Must be greater than or equal to 0.1.",
        ),
        (
            {"REFUNDS_MODEL_ATTEMPTS": "0"},
            "REFUNDS_MODEL_ATTEMPTS='0': Must be greater than or equal to 1.",
        ),
    ],
)
def test_a_bad_model_timeout_or_attempts_stops_the_process(tmp_path, env, message):
    result = manage_check(tmp_path, **env)
    assert result.stderr.startswith(f"Refund Desk cannot start: {message}"), result.stderr


def test_a_well_formed_model_spec_starts(tmp_path):
    result = manage_check(tmp_path, REFUNDS_MODEL="anthropic:claude-sonnet-4-5")
    assert result.returncode == 0, result.stderr


# --- the key stays secret ----------------------------------------------------------------------
MODEL_KEY = "sk-proj-NotARealModelKeyButLongEnough42"


def test_the_model_key_is_masked_in_a_fallback_the_reviewer_reads(settings):
    settings.REFUNDS_MODEL_API_KEY = MODEL_KEY
    chat = Scripted(script=[AuthenticationError(f"Incorrect API key provided: {MODEL_KEY}")])
    reading = read_with(chat)
    assert MODEL_KEY not in reading.fallback
    assert "Incorrect API key provided: ****" in reading.fallback


def _explode(request):
    api_key = MODEL_KEY  # noqa: F841 - a frame variable the debug page would show
    raise RuntimeError(f"the provider said: invalid key {MODEL_KEY}")


urlpatterns = [path("explode/", _explode), path("", include("config.urls"))]


def test_the_model_key_is_masked_on_error_pages_and_in_logs(db, settings, capsys):
    settings.DEBUG = True  # the worst case: Django's technical page, with frame variables
    settings.ROOT_URLCONF = __name__
    settings.REFUNDS_MODEL_API_KEY = MODEL_KEY
    from core.logs import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        page = Client(raise_request_exception=False).get("/explode/")
    finally:
        logger.removeHandler(handler)

    assert page.status_code == 500
    assert b"the provider said: invalid key" in page.content
    assert MODEL_KEY.encode() not in page.content
    logged = capsys.readouterr().err
    assert "the provider said: invalid key" in logged
    assert MODEL_KEY not in logged
    assert mask(f"key={MODEL_KEY}") == "key=********************"


def test_the_system_check_warns_when_the_configured_model_cannot_be_built(tmp_path):
    result = manage_check(tmp_path, REFUNDS_MODEL="openai:gpt-4.1-mini")
    assert result.returncode == 0, result.stderr  # a warning: the trained reader still reads
    assert (
        "intake.W001) REFUNDS_MODEL: the model openai:gpt-4.1-mini cannot be used here: its "
        "package langchain-openai is not installed; every message will be read by the trained "
        "reader"
    ) in result.stderr
