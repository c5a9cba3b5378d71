"""Schema versions: a thread paused under one state shape resumes under the next, carried across
by the upgrade sent with the resume (refunds/flow/versions.py)."""

from __future__ import annotations

import functools

import pytest

from refunds import enqueue, payments, persistence, runner, services
from refunds.flow import versions
from refunds.models import Charge, Decision, Email, Ticket


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)


@pytest.fixture
def restore_graph():
    yield
    persistence._compiled.cache_clear()  # graphs compiled with the wrapper below


def paused(agent) -> Ticket:
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    assert runner.advance(ticket.pk) == "awaiting_review"
    return Ticket.objects.get(pk=ticket.pk)


def approve(ticket: Ticket, reviewer) -> Decision:
    return services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        answer="approve",
        reviewer=reviewer,
    )


def requires_currency(name: str, fn):
    """Version N+1's nodes: the email reads the order's currency, which version N lacks."""
    if name != "email":
        return fn

    @functools.wraps(fn)
    def email(state, *args, **kwargs):
        assert state["order"]["currency"] == "USD", "a state of the old shape reached new code"
        return fn(state, *args, **kwargs)

    return email


def test_a_thread_paused_under_version_n_resumes_to_its_end_under_n_plus_1(
    transactional_db, agent, admin_user, late_order, monkeypatch, restore_graph, settings
):
    n = versions.FLOW_VERSION
    ticket = paused(agent)
    assert ticket.flow_version == n
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == n
    decision = approve(ticket, admin_user)

    # The release of version N+1: the order facts gain a currency, and an upgrade says how a
    # state of version N gets one.
    monkeypatch.setattr(runner, "FLOW_VERSION", n + 1)
    monkeypatch.setattr(versions, "FLOW_VERSION", n + 1)
    monkeypatch.setitem(
        versions.UPGRADES, n, lambda v: {"order": {**v["order"], "currency": "USD"}}
    )
    settings.REFUNDS_NODE_WRAPPER = f"{__name__}.requires_currency"

    assert runner.advance(ticket.pk) == "refunded"
    decision.refresh_from_db()
    assert decision.applied_at is not None and decision.refused_reason == ""  # the same review
    state = persistence.snapshot(ticket.thread_id).values
    assert state["flow_version"] == n + 1 and state["order"]["currency"] == "USD"
    assert Ticket.objects.get(pk=ticket.pk).flow_version == n + 1
    assert list(Charge.objects.values_list("amount_cents", flat=True)) == [699]


def test_without_the_upgrade_the_new_shape_would_not_resume(
    transactional_db, agent, admin_user, late_order, restore_graph, settings
):
    ticket = paused(agent)
    approve(ticket, admin_user)
    settings.REFUNDS_NODE_WRAPPER = f"{__name__}.requires_currency"  # new code, no upgrade
    assert runner.advance(ticket.pk) == "error"
    assert "currency" in Ticket.objects.get(pk=ticket.pk).last_error


def test_a_version_1_thread_is_stamped_with_the_current_version_when_it_resumes(
    transactional_db, agent, admin_user, late_order, monkeypatch
):
    monkeypatch.setattr(runner, "FLOW_VERSION", 1)
    ticket = paused(agent)
    Ticket.objects.filter(pk=ticket.pk).update(flow_version=1)  # as opened before version 2
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == 1
    monkeypatch.undo()
    ticket.refresh_from_db()
    approve(ticket, admin_user)
    assert runner.advance(ticket.pk) == "refunded"
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == versions.FLOW_VERSION
    assert Ticket.objects.get(pk=ticket.pk).flow_version == versions.FLOW_VERSION


def test_a_one_order_thread_paused_under_version_3_resumes_under_4_with_its_old_keys(
    transactional_db, agent, admin_user, late_order, monkeypatch, settings, sinks, request
):
    """Version 4 added `order_numbers` (a ticket of several orders). A one-order thread paused at
    its review under version 3 has none: it resumes under 4, is stamped 4 with its one order, and
    runs the one-order path to its end with the keys it started with. Counted where it lands:
    one refund at the processor under `<thread>:charge_card:<amount>`, one email at the SMTP
    server."""
    old = 3
    real_input = runner.initial_input

    def as_version_3(lease):  # what version 3's runner started a thread with
        values = dict(real_input(lease))
        values.pop("order_numbers")
        return values | {"flow_version": old}

    monkeypatch.setattr(runner, "initial_input", as_version_3)
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    Ticket.objects.filter(pk=ticket.pk).update(flow_version=old)
    assert runner.advance(ticket.pk) == "awaiting_review"
    paused_state = persistence.snapshot(ticket.thread_id).values
    assert "order_numbers" not in paused_state and paused_state["flow_version"] == old
    monkeypatch.undo()  # the release of version 4

    settings.REFUNDS_GATEWAY = "refunds.payments.HttpGateway"
    settings.REFUNDS_GATEWAY_URL = sinks.gateway.url
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", sinks.smtp.port
    payments.get_gateway.cache_clear()  # one gateway per process, built from the settings
    request.addfinalizer(payments.get_gateway.cache_clear)
    ticket.refresh_from_db()
    decision = approve(ticket, admin_user)
    assert runner.advance(ticket.pk) == "refunded"

    decision.refresh_from_db()
    assert decision.applied_at is not None and decision.refused_reason == ""  # the same review
    state = persistence.snapshot(ticket.thread_id).values
    assert state["flow_version"] == versions.FLOW_VERSION == 4
    assert state["order_numbers"] == ["1042"]
    assert not state.get("checks") and not state.get("charges")  # not the fan-out's path
    assert Ticket.objects.get(pk=ticket.pk).flow_version == 4
    key = f"{ticket.thread_id}:charge_card:699"
    assert sinks.gateway.charge_calls == {key: 1}
    assert [r["amount_cents"] for r in sinks.gateway.refunds_for(ticket.thread_id)] == [699]
    assert list(Charge.objects.values_list("idempotency_key", "status")) == [(key, "succeeded")]
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    assert list(Email.objects.values_list("key", flat=True)) == [f"{ticket.thread_id}:email"]
