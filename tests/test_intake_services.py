"""message_receive: one row per key, whatever the channel; faults refused for callers who can read
a refusal, kept for "Needs sorting" when the mail provider brought them; the intake started on
commit, once."""

from __future__ import annotations

import base64
import json
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from config.celery_app import app
from intake.models import Message
from intake.services import MessageRefused, message_receive, messages_recover
from intake.steps import TABLE
from refunds import enqueue
from refunds import lease as leases
from tests.conftest import helpdesk, purge_broker

BODY = "Hi, my order #1042 came a week late, can I have the delivery charge back?"


@pytest.fixture
def sent(monkeypatch) -> list[int]:
    ids: list[int] = []
    monkeypatch.setattr(enqueue, "send", lambda name, pk: ids.append(pk) or True)
    return ids


def receive(channel: str = "api", key: str = "k1", **changes):
    fields = {
        "channel": channel,
        "key": key,
        "sender": "ana@example.com",
        "subject": "Late",
        "body": BODY,
        "received_at": timezone.now(),
        "raw": BODY,
        "brought_by": None if channel == "email" else helpdesk(),
        **changes,
    }
    return message_receive(**fields)


def test_a_message_is_stored_with_its_channel_prefixed_key_and_a_thread_of_its_own(db, sent):
    with_commit = transaction.atomic
    with with_commit():
        message, created = receive()
    assert created and message.key == "api:k1" and message.thread_id.startswith("intake-")
    assert message.status == "received" and message.sorting_reason == ""


def test_the_intake_starts_when_the_message_commits(transactional_db, sent):
    message, _ = receive()
    assert sent == [message.pk]


def test_the_intake_does_not_start_for_a_message_that_was_rolled_back(transactional_db, sent):
    with pytest.raises(RuntimeError), transaction.atomic():
        receive()
        raise RuntimeError("the caller failed after")
    assert sent == [] and Message.objects.count() == 0


def test_a_message_delivered_twice_is_one_message_and_starts_once(transactional_db, sent):
    first, created = receive()
    again, created_again = receive(body="the same key, whatever the body")
    assert created and not created_again and again.pk == first.pk
    assert again.body == BODY and sent == [first.pk]


def test_the_same_key_on_two_channels_is_two_messages(transactional_db, sent):
    receive(channel="api", key="x")
    receive(channel="email", key="x")
    assert Message.objects.count() == 2


def test_two_deliveries_at_once_make_one_message(transactional_db, sent):
    barrier = threading.Barrier(2)
    results: list[bool] = []

    def deliver() -> None:
        try:
            barrier.wait()
            results.append(receive(channel="email", key="<race@x>")[1])
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, True]
    assert Message.objects.count() == 1 and len(sent) == 1


@pytest.mark.parametrize("channel", ["api", "desk"])
@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"body": " \n "}, "The message has no text."),
        ({"sender": "ana"}, "The sender 'ana' is not an email address."),
        ({"sender": ""}, "The sender's address is missing."),
        ({"body": "x" * 20_001}, "The message is 20,001 characters long; at most 20,000"),
    ],
)
def test_a_caller_is_refused_a_faulty_message_and_nothing_is_stored(
    transactional_db, sent, channel, changes, words
):
    with pytest.raises(MessageRefused, match=words.replace("(", r"\(")[:40]):
        receive(channel=channel, **changes)
    assert Message.objects.count() == 0 and sent == []


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"body": ""}, "The message has no text."),
        ({"sender": "Ana Souza"}, "is not an email address"),
    ],
)
def test_an_email_with_a_fault_is_kept_and_marked_for_sorting(
    transactional_db, sent, changes, words
):
    message, created = receive(channel="email", **changes)
    assert created and words in message.sorting_reason and sent == [message.pk]


def test_an_email_longer_than_the_limit_is_cut_for_reading_and_is_no_fault(transactional_db, sent):
    message, created = receive(channel="email", body=BODY + "x" * 20_000, raw="the whole MIME")
    assert created and message.sorting_reason == "" and sent == [message.pk]
    assert message.body == (BODY + "x" * 20_000)[:20_000]
    assert message.uncut_chars == len(BODY) + 20_000 and message.raw == "the whole MIME"


def test_a_message_within_the_limit_is_not_cut(transactional_db, sent):
    message, _ = receive(channel="email")
    assert message.uncut_chars is None and message.cut_note == ""


def test_a_nul_character_is_kept_as_a_replacement_character(transactional_db, sent):
    message, _ = receive(body="late\x00 #1042", subject="a\x00b")
    message.refresh_from_db()
    assert message.body == "late\ufffd #1042" and message.subject == "a\ufffdb"


def test_a_very_long_key_is_kept_as_its_digest(transactional_db, sent):
    message, _ = receive(channel="email", key="<" + "x" * 400 + "@mail>")
    assert message.key.startswith("email:sha256:") and len(message.key) < 300
    assert receive(channel="email", key="<" + "x" * 400 + "@mail>")[0].pk == message.pk


def test_an_unknown_channel_is_a_bug(db):
    with pytest.raises(ValueError, match="unknown channel"):
        receive(channel="fax")


# --- the sweep's wake-ups -------------------------------------------------------------------------
def queued_wake_ups() -> list[int]:
    """The message id of every intake wake-up waiting in the broker's `intake` queue."""
    with app.connection_for_write() as conn:
        raw = conn.default_channel.client.lrange("intake", 0, -1)
    bodies = [json.loads(base64.b64decode(json.loads(item)["body"])) for item in raw]
    return sorted(args[0] for args, _, _ in bodies)


@pytest.fixture
def quiet_broker(broker):
    purge_broker()
    yield
    purge_broker()


def test_two_sweeps_in_a_row_queue_one_wake_up_per_message(db, quiet_broker, settings):
    """The review's finding: 656 intake wake-ups queued for 42 messages, one per sweep each."""
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    ids = sorted(receive(key=f"k{n}", wake=False)[0].pk for n in range(3))
    assert messages_recover() == ids
    messages_recover()
    assert queued_wake_ups() == ids


def test_the_sweep_wakes_a_message_again_once_a_worker_took_it_and_its_lease_ran_out(
    db, quiet_broker, settings
):
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    message, _ = receive(wake=False)
    messages_recover()
    purge_broker()  # a worker took the wake-up
    assert leases.grant_row(TABLE, message.pk, thread_id=message.thread_id)
    lapsed = timezone.now() - timedelta(seconds=1)  # it died
    Message.objects.filter(pk=message.pk).update(lease_expires_at=lapsed)
    messages_recover()
    messages_recover()
    assert queued_wake_ups() == [message.pk]


def test_the_sweep_wakes_a_message_again_when_its_wake_up_may_have_been_lost(
    db, quiet_broker, settings
):
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    message, _ = receive(wake=False)
    messages_recover()
    purge_broker()  # lost with the broker
    woken = timezone.now() - timedelta(seconds=settings.REFUNDS_REWAKE_SECONDS + 1)
    Message.objects.filter(pk=message.pk).update(woken_at=woken)
    messages_recover()
    assert queued_wake_ups() == [message.pk]
