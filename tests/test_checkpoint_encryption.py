"""Checkpoints and the store encrypted at rest (issue 48): the first key writes, every listed key
reads, a key no longer listed is named when its rows are read; production needs a key; the
fenced saver, fork, the history page and the flow-version carry-over work on encrypted threads;
the command rewrites every kind of row under the newest key."""

from __future__ import annotations

import base64
import io
import json
import sqlite3
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse

from config.env import BadSetting, aes_keys
from ops import selectors
from refunds import enqueue, persistence, runner, services
from refunds.flow.nodes import customer_namespace
from refunds.management.commands import upgrade_threads as upgrade_threads_command
from refunds.models import Ticket
from refunds.persistence.encryption import AesGcmCipher, UnknownKey, key_id
from tests.reviewing import advance_to_review as review
from tests.reviewing import decide
from tests.test_ops_versions import release_n_plus_1
from tests.test_settings import PRODUCTION, manage_check

OLD, NEW = b"o" * 32, b"n" * 32
PHRASE = "Marigold zephyr on the doorstep"  # the opener's note: customer's words in the state


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # the tests advance by hand


@pytest.fixture
def keys(tmp_path) -> Iterator[Callable[..., None]]:
    """Restart this process's persistence under the keys given (the first writes). The setting
    changes before the restart, both ways: whatever opens persistence in between (a lease
    renewal's thread) opens it under the keys of the moment, never under stale ones."""
    overrides: list[override_settings] = []

    def override(**values: object) -> None:
        overrides.append(override_settings(**values))
        overrides[-1].enable()
        persistence.close_persistence()

    if not settings.IS_POSTGRES:
        # A checkpoint file of its own: the command reads every row, and the suite's file
        # outlives the run (a run with other keys would leave rows no key here reads).
        override(CHECKPOINT_URL=f"sqlite:///{tmp_path / 'checkpoints.sqlite3'}")
        persistence.setup_persistence()

    yield lambda *ring: override(REFUNDS_CHECKPOINT_KEYS=list(ring))
    if settings.IS_POSTGRES:  # the suite's tables: no row is left that the next test cannot read
        with persistence.checkpoint_connection(persistence.checkpointer().conn) as conn:
            conn.execute("TRUNCATE checkpoints, checkpoint_blobs, checkpoint_writes")
    store = persistence.store()  # sealed values would read as garbage in the next test's
    if isinstance(store.conn, sqlite3.Connection):
        store.conn.execute("DELETE FROM store")
    else:
        with store.conn.connection() as conn:
            conn.execute("DELETE FROM store")
    for done in reversed(overrides):
        done.disable()
    persistence.close_persistence()


def stored(thread_id: str) -> dict[str, list[tuple[str | None, bytes]]]:
    """The thread's rows as the checkpointer keeps them: (type, bytes) per table; metadata and
    the PostgreSQL checkpoint's JSON under their own names, typed None."""
    saver = persistence.checkpointer()
    if isinstance(saver, persistence.FencedSqliteSaver):
        with saver.lock:
            conn = saver.conn
            ckpts = conn.execute(
                "SELECT type, checkpoint, metadata FROM checkpoints WHERE thread_id = ?",
                (thread_id,),
            ).fetchall()
            writes = conn.execute(
                "SELECT type, value FROM writes WHERE thread_id = ?", (thread_id,)
            ).fetchall()
        return {
            "checkpoints": [(t, bytes(c)) for t, c, _ in ckpts],
            "metadata": [(None, bytes(m)) for _, _, m in ckpts],
            "writes": [(t, bytes(v)) for t, v in writes],
        }
    with persistence.checkpoint_connection(saver.conn) as conn:
        ckpts = conn.execute(
            "SELECT checkpoint::text AS c, metadata::text AS m FROM checkpoints "
            "WHERE thread_id = %s",
            (thread_id,),
        ).fetchall()
        found = {
            table: conn.execute(
                f"SELECT type, blob FROM {table} WHERE thread_id = %s AND blob IS NOT NULL",
                (thread_id,),
            ).fetchall()
            for table in ("checkpoint_blobs", "checkpoint_writes")
        }
    return {
        "checkpoint json": [(None, r["c"].encode()) for r in ckpts],
        "metadata": [(None, r["m"].encode()) for r in ckpts],
        **{t: [(r["type"], bytes(r["blob"])) for r in rows] for t, rows in found.items()},
    }


def store_values() -> list[dict]:
    saver = persistence.checkpointer()
    if isinstance(saver, persistence.FencedSqliteSaver):
        with saver.lock:
            return [json.loads(v) for (v,) in saver.conn.execute("SELECT value FROM store")]
    with persistence.checkpoint_connection(saver.conn) as conn:
        return [r["value"] for r in conn.execute("SELECT value FROM store").fetchall()]


def in_clear(rows: dict[str, list[tuple[str | None, bytes]]], words: str) -> list[str]:
    return [table for table, found in rows.items() if any(words.encode() in b for _, b in found)]


def key_ids(rows: dict[str, list[tuple[str | None, bytes]]]) -> dict[str, set[str]]:
    """Per table of typed rows: the key ids its rows are under ("clear" for none)."""
    return {
        table: {t.split("+aesgcm-")[1] if "+aesgcm-" in t else "clear" for t, _ in found}
        for table, found in rows.items()
        if found and found[0][0] is not None
    }


def reencrypt() -> str:
    out = io.StringIO()
    call_command("reencrypt_checkpoints", "--batch", "3", stdout=out)
    return out.getvalue()


# --- the cipher and the settings ---------------------------------------------------------------
def test_the_first_key_writes_and_every_listed_key_reads():
    name, sealed = AesGcmCipher([OLD]).encrypt(b"words")
    rotated = AesGcmCipher([NEW, OLD])

    assert name == f"aesgcm-{key_id(OLD)}" and b"words" not in sealed
    assert rotated.encrypt(b"more")[0] == f"aesgcm-{key_id(NEW)}"
    assert rotated.decrypt(name, sealed) == b"words"


def test_a_ciphertext_under_a_key_no_longer_listed_is_refused_naming_its_key_id():
    name, sealed = AesGcmCipher([OLD]).encrypt(b"words")
    with pytest.raises(UnknownKey, match=f"under key {key_id(OLD)}, which"):
        AesGcmCipher([NEW]).decrypt(name, sealed)


@pytest.mark.parametrize(
    "raw", ["not a key", base64.urlsafe_b64encode(b"k" * 16).decode(), "a" * 44 + ",x"]
)
def test_a_malformed_key_is_refused_naming_the_variable_and_never_echoing_it(raw):
    with pytest.raises(BadSetting, match="^REFUNDS_CHECKPOINT_KEYS: key [12] is not") as refused:
        aes_keys("REFUNDS_CHECKPOINT_KEYS", raw)
    assert raw not in str(refused.value)


def test_several_keys_are_read_in_order():
    raw = ",".join(base64.urlsafe_b64encode(k).decode() for k in (NEW, OLD))
    assert aes_keys("REFUNDS_CHECKPOINT_KEYS", f" {raw} ") == [NEW, OLD]
    assert aes_keys("REFUNDS_CHECKPOINT_KEYS", "") == []


def test_production_refuses_to_start_without_a_key_unless_told(tmp_path):
    keyless = {**PRODUCTION, "REFUNDS_CHECKPOINT_KEYS": ""}
    refused = manage_check(tmp_path, **keyless)
    allowed = manage_check(tmp_path, **keyless, REFUNDS_ALLOW_UNENCRYPTED_CHECKPOINTS="true")
    bad = manage_check(tmp_path, **{**PRODUCTION, "REFUNDS_CHECKPOINT_KEYS": "short"})

    assert refused.returncode != 0
    assert refused.stderr.startswith("Refund Desk cannot start: REFUNDS_CHECKPOINT_KEYS is empty")
    assert allowed.returncode == 0, allowed.stderr
    assert bad.stderr.startswith("Refund Desk cannot start: REFUNDS_CHECKPOINT_KEYS: key 1 is")


# --- threads under keys ------------------------------------------------------------------------
def test_without_keys_the_words_are_in_clear_and_the_command_encrypts_them_in_place(
    transactional_db, keys, agent, late_order
):
    keys()  # as before keys were set
    ticket = review(services.ticket_open(order_number="1042", note=PHRASE))
    memory = {"amount_cents": 250, "order": "1040", "refunded_on": "2026-11-02"}
    persistence.store().put(customer_namespace(late_order.customer_email), "refund-1", memory)
    before = persistence.snapshot(ticket.thread_id)
    assert in_clear(stored(ticket.thread_id), PHRASE)  # what this test looks for, it can see

    keys(NEW, OLD)  # OLD: on PostgreSQL, other tests' threads the command reads too
    assert persistence.snapshot(ticket.thread_id).values == before.values  # old rows still read
    assert "Rewrote" in reencrypt()

    rows = stored(ticket.thread_id)
    assert in_clear(rows, PHRASE) == []
    assert key_ids(rows) and all(ids == {key_id(NEW)} for ids in key_ids(rows).values())
    after = persistence.snapshot(ticket.thread_id)
    assert after.values == before.values and after.config == before.config  # same checkpoint
    (sealed,) = store_values()
    assert set(sealed) == {"sealed", "data"} and key_id(NEW) in sealed["sealed"]
    assert selectors.customer_memory(late_order.customer_email) == [
        {"ticket_key": "refund-1", **memory}
    ]


def test_an_encrypted_ticket_forks_browses_rotates_reencrypts_and_reads_after_the_old_key_goes(
    client, transactional_db, keys, agent, admin_user, late_order
):
    keys(OLD)
    ticket = review(services.ticket_open(order_number="1042", note=PHRASE))
    rows = stored(ticket.thread_id)
    assert in_clear(rows, PHRASE) == []
    assert all(ids == {key_id(OLD)} for ids in key_ids(rows).values())

    services.ticket_fork(ticket=ticket, amount_cents=500, reason="part of the fee", by=admin_user)
    ticket = review(ticket)
    assert ticket.amount_cents == 500
    decide(ticket, admin_user)
    assert runner.advance(ticket.pk) == "refunded"
    (remembered,) = store_values()
    assert set(remembered) == {"sealed", "data"} and key_id(OLD) in remembered["sealed"]
    client.force_login(admin_user)
    page = client.get(reverse("ops:history", args=[ticket.pk]))
    assert page.status_code == 200 and "$5.00" in page.content.decode()

    keys(NEW, OLD)  # a new key first, the old one still listed
    state = persistence.snapshot(ticket.thread_id).values
    assert state["outcome"] == "refunded" and state["note"] == PHRASE
    assert selectors.customer_memory(late_order.customer_email)[0]["amount_cents"] == 500

    out = reencrypt()
    rows = stored(ticket.thread_id)
    assert in_clear(rows, PHRASE) == []
    assert all(ids == {key_id(NEW)} for ids in key_ids(rows).values()), out
    tables = set(key_ids(rows))
    assert {"checkpoints", "writes"} <= tables or {
        "checkpoint_blobs",
        "checkpoint_writes",
    } <= tables
    assert key_id(NEW) in store_values()[0]["sealed"]
    assert reencrypt().endswith("Rewrote 0 row(s) under the newest key.\n")  # a rerun: nothing

    keys(NEW)  # the old key dropped
    assert persistence.snapshot(ticket.thread_id).values == state
    assert client.get(reverse("ops:history", args=[ticket.pk])).status_code == 200
    assert selectors.customer_memory(late_order.customer_email)[0]["amount_cents"] == 500

    keys(OLD)  # a box that was never given the new key says which one it lacks
    with pytest.raises(UnknownKey, match=key_id(NEW)):
        persistence.snapshot(ticket.thread_id)
    keys()  # and one with no keys at all, of the store's sealed values
    with pytest.raises(UnknownKey, match="REFUNDS_CHECKPOINT_KEYS is empty"):
        selectors.customer_memory(late_order.customer_email)


def test_an_encrypted_thread_paused_under_version_n_is_carried_to_n_plus_1(
    transactional_db, keys, agent, admin_user, late_order, monkeypatch, settings
):
    from refunds.flow import versions

    keys(OLD)
    n = versions.FLOW_VERSION
    ticket = review(services.ticket_open(order_number="1042", opened_by=agent, note=PHRASE))
    release_n_plus_1(monkeypatch, settings, n)
    persistence._compiled.cache_clear()  # the graph of version N+1's nodes

    out = io.StringIO()
    call_command("upgrade_threads", stdout=out)
    assert "Carried 1 thread(s)" in out.getvalue()
    assert upgrade_threads_command.FLOW_VERSION == n + 1
    state = persistence.snapshot(ticket.thread_id).values
    assert state["order"]["currency"] == "USD" and state["flow_version"] == n + 1
    rows = stored(ticket.thread_id)
    assert in_clear(rows, PHRASE) == [] and in_clear(rows, "USD") == []
    decide(Ticket.objects.get(pk=ticket.pk), admin_user)
    assert runner.advance(ticket.pk) == "refunded"
