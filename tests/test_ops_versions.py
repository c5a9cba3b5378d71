"""Schema versions: a thread paused under one state shape waits until manage.py upgrade_threads
carries it to the next (refunds/flow/versions.py), then resumes under it."""

from __future__ import annotations

import functools
import io

import pytest
from django.core.management import CommandError, call_command

from refunds import enqueue, forks, payments, persistence, runner, services
from refunds.flow import versions
from refunds.flow.nodes import customer_namespace
from refunds.management.commands import upgrade_threads as upgrade_threads_command
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
        reviewer=reviewer,
        orders=services.review_answers(ticket, answer="approve"),
    )


def upgrade_threads() -> str:
    out = io.StringIO()
    call_command("upgrade_threads", stdout=out)
    return out.getvalue()


def carried(ticket: Ticket) -> Ticket:
    """The ticket after the command, which leaves none on an older version."""
    assert "None left" in upgrade_threads()
    return Ticket.objects.get(pk=ticket.pk)


def requires_currency(name: str, fn):
    """Version N+1's nodes: the email reads the order's currency, which version N lacks."""
    if name != "email":
        return fn

    @functools.wraps(fn)
    def email(state, *args, **kwargs):
        assert state["order"]["currency"] == "USD", "a state of the old shape reached new code"
        return fn(state, *args, **kwargs)

    return email


def release_n_plus_1(monkeypatch, settings, n: int) -> None:
    """The release of version N+1: the order facts gain a currency, and an upgrade says how a
    state of version N gets one."""
    for module in (runner, versions, upgrade_threads_command):
        monkeypatch.setattr(module, "FLOW_VERSION", n + 1)
    monkeypatch.setitem(
        versions.UPGRADES, n, lambda v: {"order": {**v["order"], "currency": "USD"}}
    )
    settings.REFUNDS_NODE_WRAPPER = f"{__name__}.requires_currency"


def test_a_thread_paused_under_version_n_waits_for_the_command_then_ends_under_n_plus_1(
    transactional_db, agent, admin_user, late_order, monkeypatch, restore_graph, settings
):
    n = versions.FLOW_VERSION
    ticket = paused(agent)
    assert ticket.flow_version == n
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == n

    release_n_plus_1(monkeypatch, settings, n)

    # The runner does not run it (nor fail it): it waits for the command, which it names.
    decision = approve(ticket, admin_user)
    assert runner.advance(ticket.pk) == "old version"
    waiting = Ticket.objects.get(pk=ticket.pk)
    assert waiting.status == "awaiting_review" and waiting.attempts == ticket.attempts
    assert "manage.py upgrade_threads" in waiting.last_error
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == n

    assert "Carried 1 thread(s)" in upgrade_threads()  # and applies the answer waiting
    decision.refresh_from_db()
    assert decision.applied_at is not None and decision.refused_reason == ""  # the same review
    state = persistence.snapshot(ticket.thread_id).values
    assert state["flow_version"] == n + 1 and state["order"]["currency"] == "USD"
    assert Ticket.objects.get(pk=ticket.pk).flow_version == n + 1
    assert list(Charge.objects.values_list("amount_cents", flat=True)) == [699]


def test_the_command_carries_a_paused_review_without_answering_it_and_twice_changes_nothing(
    transactional_db, agent, admin_user, late_order, monkeypatch, restore_graph, settings
):
    n = versions.FLOW_VERSION
    ticket = paused(agent)
    release_n_plus_1(monkeypatch, settings, n)

    assert "Carried 1 thread(s)" in upgrade_threads()
    after = Ticket.objects.get(pk=ticket.pk)
    assert after.flow_version == n + 1 and after.status == "awaiting_review"
    assert after.pending_interrupt_id == ticket.pending_interrupt_id  # the same review
    state = persistence.snapshot(ticket.thread_id)
    assert state.values["order"]["currency"] == "USD"

    assert upgrade_threads() == (
        f"Carried 0 thread(s) to flow version {n + 1}.\nNone left on an older version.\n"
    )
    again = persistence.snapshot(ticket.thread_id)
    assert again.values == state.values and again.config == state.config
    assert Ticket.objects.get(pk=ticket.pk).lease_epoch == after.lease_epoch  # not even leased

    approve(after, admin_user)
    assert runner.advance(ticket.pk) == "refunded"
    assert list(Charge.objects.values_list("amount_cents", flat=True)) == [699]


def test_the_command_exits_non_zero_while_a_thread_is_left_on_an_older_version(
    transactional_db, agent, late_order, monkeypatch
):
    ticket = paused(agent)
    Ticket.objects.filter(pk=ticket.pk).update(flow_version=1, status="failed")
    with pytest.raises(CommandError, match=f"1 left on an older version: ticket {ticket.pk}"):
        upgrade_threads()


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
    ticket = carried(ticket)
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == versions.FLOW_VERSION
    approve(ticket, admin_user)
    assert runner.advance(ticket.pk) == "refunded"
    assert Ticket.objects.get(pk=ticket.pk).flow_version == versions.FLOW_VERSION


# --- version 4 to 5: one path for one order or several ---------------------------------------
# Version 4 ran a ticket of one order through its own nodes (lookup, fraud_check, history_check,
# check_policy, triage, approve, charge_card, email) and charged it under
# "<thread>:charge_card:<amount>". Below is that path as version 4 ran it, its checks being the
# same functions; a thread is paused on it at each place a thread can wait, then carried on by
# today's runner and graph, and counted where its effects land.


class Crash(Exception):
    """The worker died here (the run stops; what was written before stays)."""


def version_4(crash_at: str):
    """Version 4's one-order graph; `crash_at` names the node whose run dies the first time."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    from refunds.flow.nodes import checks, review
    from refunds.flow.state import Collaborators, RefundState

    crashed: set[str] = set()

    def dies(name, fn):
        @functools.wraps(fn)
        def node(state, *args, **kwargs):
            if name == crash_at and name not in crashed:
                crashed.add(name)
                if name == "charge_card":  # the charge went through, its answer was lost
                    fn(state, *args, **kwargs)
                raise Crash(name)
            return fn(state, *args, **kwargs)

        return node

    def approve(state):
        answer = interrupt(
            {
                "action_request": {
                    "action": "refund",
                    "args": {
                        "order": state["order"]["number"],
                        "amount_cents": state["amount_cents"],
                    },
                },
                "description": "**Refund** (version 4)",
                "required_role": state["required_role"],
                "amount_cents": state["amount_cents"],
                "order": state["order"],
                "late_by_days": state["late_by_days"],
                "flags": list(state.get("flags", [])),
                "notes": [],
                "history": state["history"],
                "payment_error": state.get("payment_error", ""),
                "reason": state.get("reason", "late_delivery"),
                "reading": None,
            }
        )
        update = {"decision": answer, "trail": ["approve"]}
        if answer.get("amount_cents") is not None:
            update["amount_cents"] = answer["amount_cents"]
        if answer["answer"] == "reject":
            update |= {"outcome": "rejected", "outcome_reason": answer.get("reason", "")}
        return update

    def charge_card(state, runtime):
        if crash_at == "refused" and "refused" not in crashed:  # a decline: back to a manager
            crashed.add("refused")
            why = "card_declined"
            return Command(
                update={
                    "payment_error": why,
                    "required_role": "manager",
                    "trail": ["payment_failed"],
                },
                goto="approve",
            )
        amount = state["amount_cents"]
        key = f"{state['ticket_key']}:charge_card:{amount}"
        receipt = runtime.context.pay(key=key, amount_cents=amount)
        return Command(update={"receipt": receipt, "trail": ["charge_card"]}, goto="email")

    def not_reached(state):
        raise AssertionError("version 4 never gets this far in these tests")

    def build_graph(wrap=None, tracking=None):
        g = StateGraph(RefundState, context_schema=Collaborators)
        for name, fn in [
            ("lookup", checks.lookup),
            ("fraud_check", checks.fraud_check),
            ("history_check", checks.history_check),
            ("check_policy", checks.check_policy),
            ("decline", not_reached),
            ("triage", review.triage),
            ("received", not_reached),  # today's triage names it; a version-4 ticket never goes
            ("approve", approve),
            ("charge_card", charge_card),
            ("email", not_reached),
            ("notify", not_reached),
        ]:
            g.add_node(name, dies(name, fn))
        g.add_edge(START, "lookup")
        g.add_edge("lookup", "fraud_check")
        g.add_edge("lookup", "history_check")
        g.add_edge(["fraud_check", "history_check"], "check_policy")
        g.add_conditional_edges("check_policy", checks.route_policy, ["decline", "triage"])
        g.add_conditional_edges(
            "approve",
            lambda s: "charge_card" if s["decision"]["answer"] == "approve" else "notify",
            ["charge_card", "notify"],
        )
        g.add_edge("decline", "notify")
        g.add_edge("notify", END)
        g.add_edge("email", END)
        return g

    return build_graph


@pytest.fixture
def on_version_4(monkeypatch, restore_graph, settings, sinks, request):
    """Run a ticket on version 4's graph until it waits at its review ("review", or "refused":
    again after its charge was declined) or dies at the node `crash_at`; then release version 5
    (today's code), the gateway and the mail server counting at their ends."""
    settings.REFUNDS_GATEWAY = "refunds.payments.HttpGateway"
    settings.REFUNDS_GATEWAY_URL = sinks.gateway.url
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", sinks.smtp.port
    payments.get_gateway.cache_clear()  # one gateway per process, built from the settings
    request.addfinalizer(payments.get_gateway.cache_clear)
    real_input = runner.initial_input

    def start(agent, reviewer, crash_at: str, *, approved: bool = False) -> Ticket:
        def as_version_4(lease):
            return dict(real_input(lease)) | {"flow_version": 4}

        monkeypatch.setattr(runner, "initial_input", as_version_4)
        monkeypatch.setattr(runner, "FLOW_VERSION", 4)
        monkeypatch.setattr(persistence, "build_graph", version_4(crash_at))
        persistence._compiled.cache_clear()
        ticket = services.ticket_open(order_number="1042", opened_by=agent)
        Ticket.objects.filter(pk=ticket.pk).update(flow_version=4)
        outcome = runner.advance(ticket.pk)
        if approved:
            assert outcome == "awaiting_review"
            waiting = Ticket.objects.get(pk=ticket.pk)  # approved as version 4's desk recorded it
            Decision.objects.create(
                ticket=waiting,
                interrupt_id=waiting.pending_interrupt_id,
                reviewer=reviewer,
                answer="approve",
            )
            outcome = runner.advance(ticket.pk)
        waits = crash_at in ("review", "refused")  # at its (first or second) review
        assert outcome == ("awaiting_review" if waits else "error"), outcome
        state = persistence.snapshot(ticket.thread_id)
        assert state.values["flow_version"] == 4 and not state.values.get("checks")
        monkeypatch.undo()  # the release of version 5
        persistence._compiled.cache_clear()
        if not waits:  # the worker that died: its ticket is retried
            Ticket.objects.filter(pk=ticket.pk).update(status="running", attempts=0)
        return Ticket.objects.get(pk=ticket.pk)

    return start


def landed(sinks, ticket: Ticket) -> tuple[list[int], dict[str, int]]:
    """What the processor refunded for the ticket, and the emails the SMTP server took."""
    return [r["amount_cents"] for r in sinks.gateway.refunds_for(ticket.thread_id)], dict(
        sinks.smtp.keys()
    )


def carried_to_5(ticket: Ticket) -> dict:
    state = persistence.snapshot(ticket.thread_id).values
    assert state["flow_version"] == versions.FLOW_VERSION
    assert Ticket.objects.get(pk=ticket.pk).flow_version == versions.FLOW_VERSION
    return state


def test_a_one_order_thread_paused_at_its_review_under_version_4_is_reviewed_and_refunded_once(
    transactional_db, agent, admin_user, late_order, on_version_4, sinks
):
    ticket = on_version_4(agent, admin_user, "review")
    assert ticket.pending_payload["action_request"]["args"] == {
        "order": "1042",
        "amount_cents": 699,
    }
    ticket = carried(ticket)  # the same review, on today's card
    assert ticket.pending_payload["orders"][0]["number"] == "1042"
    decision = approve(ticket, admin_user)

    assert runner.advance(ticket.pk) == "refunded"
    decision.refresh_from_db()
    assert decision.applied_at is not None and decision.refused_reason == ""  # the same review
    state = carried_to_5(ticket)
    assert state["checks"]["1042"]["answer"] == {
        "answer": "approve",
        "amount_cents": 699,
        "parts": [{"shipping": True, "amount_cents": 699}],  # reviewed under today's version
    }
    key = f"{ticket.thread_id}:charge_card:1042:699"  # charged after the carry-over: today's key
    assert sinks.gateway.charge_calls == {key: 1}
    assert landed(sinks, ticket) == ([699], {f"{ticket.thread_id}:email": 1})


def test_a_lower_amount_approved_on_a_version_4_review_is_paid_at_that_amount(
    transactional_db, agent, manager, late_order, on_version_4, sinks
):
    ticket = carried(on_version_4(agent, manager, "review"))
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve", amount_cents=500),
    )
    assert runner.advance(ticket.pk) == "refunded"
    carried_to_5(ticket)
    assert landed(sinks, ticket) == ([500], {f"{ticket.thread_id}:email": 1})


def test_a_version_4_thread_whose_charge_went_through_unrecorded_never_charges_again(
    transactional_db, agent, admin_user, late_order, on_version_4, sinks
):
    """Paused during its charge: the money moved under version 4's key, the run died before
    it was written down. Version 5 charges that order under the old key, which the gateway
    answers with the first refund."""
    ticket = on_version_4(agent, admin_user, "charge_card", approved=True)
    old_key = f"{ticket.thread_id}:charge_card:699"
    assert sinks.gateway.charge_calls == {old_key: 1}

    assert carried(ticket).status == "refunded"
    state = carried_to_5(ticket)
    assert state["charges"]["1042"]["receipt"]
    assert sinks.gateway.charge_calls == {old_key: 1}  # the ledger knew the key: never again
    assert landed(sinks, ticket) == ([699], {f"{ticket.thread_id}:email": 1})
    assert list(Charge.objects.values_list("idempotency_key", "status")) == [(old_key, "succeeded")]


def test_a_version_4_thread_paused_after_its_charge_only_sends_the_email(
    transactional_db, agent, admin_user, late_order, on_version_4, sinks
):
    ticket = on_version_4(agent, admin_user, "email", approved=True)
    old_key = f"{ticket.thread_id}:charge_card:699"

    assert carried(ticket).status == "refunded"
    carried_to_5(ticket)
    assert sinks.gateway.charge_calls == {old_key: 1}  # never charged again
    assert landed(sinks, ticket) == ([699], {f"{ticket.thread_id}:email": 1})
    assert list(Email.objects.values_list("key", flat=True)) == [f"{ticket.thread_id}:email"]
    # The customer's refund record, which the next ticket's history check reads, is written.
    records = persistence.store().search(customer_namespace(late_order.customer_email))
    assert [(r.key, r.value["amount_cents"]) for r in records] == [
        (f"{ticket.thread_id}:1042", 699)
    ]


def test_a_version_4_thread_that_died_in_its_checks_starts_again_on_the_one_path(
    transactional_db, agent, admin_user, late_order, on_version_4, sinks
):
    """A run that died in its checks under version 4 (its checkpoint waits on version 4's
    history_check, a node gone) runs the ticket's checks again on the one path."""
    ticket = on_version_4(agent, admin_user, "history_check")

    assert carried(ticket).status == "awaiting_review"
    state = carried_to_5(ticket)
    assert state["checks"]["1042"]["amount_cents"] == 699
    assert "check_order:1042" in state["trail"] and "check_policy" not in state["trail"]
    ticket.refresh_from_db()
    assert ticket.pending_payload["orders"][0]["number"] == "1042"
    approve(ticket, admin_user)
    assert runner.advance(ticket.pk) == "refunded"
    assert landed(sinks, ticket) == ([699], {f"{ticket.thread_id}:email": 1})


def test_a_declined_version_4_thread_forked_at_its_second_review_is_never_charged_unreviewed(
    transactional_db, agent, admin_user, manager, late_order, on_version_4, sinks
):
    """Its state still holds the first approval. Carried over with a fork (pending work:
    triage), the runner must not take that old approval for a charge due: the fork's amount
    goes to a new review, and only its answer is paid."""
    ticket = on_version_4(agent, admin_user, "refused", approved=True)
    assert ticket.pending_payload["payment_error"] == "card_declined"
    assert persistence.snapshot(ticket.thread_id).values["decision"]["answer"] == "approve"
    services.ticket_fork(ticket=ticket, amount_cents=500, reason="part of it", by=admin_user)

    assert carried(ticket).status == "awaiting_review"
    assert runner.advance(ticket.pk) == "awaiting_review"
    assert sinks.gateway.charge_calls == {}  # nothing charged without a review
    ticket = Ticket.objects.get(pk=ticket.pk)
    assert ticket.amount_cents == 500
    approve(ticket, manager)
    assert runner.advance(ticket.pk) == "refunded"
    carried_to_5(ticket)
    assert landed(sinks, ticket) == ([500], {f"{ticket.thread_id}:email": 1})


def test_a_fork_never_starts_from_a_checkpoint_of_a_version_before_the_carry(
    transactional_db, agent, admin_user, late_order, on_version_4, sinks
):
    ticket = carried(on_version_4(agent, admin_user, "refused", approved=True))
    reviews = [s for s in persistence.history(ticket.thread_id) if s.next == ("approve",)]
    assert [versions.version_of(s.values) for s in reviews] == [versions.FLOW_VERSION, 4]
    first_review = reviews[-1].config["configurable"]["checkpoint_id"]
    assert forks.fork_base(ticket.thread_id, first_review) is None
    assert forks.fork_base(ticket.thread_id) == reviews[0]
