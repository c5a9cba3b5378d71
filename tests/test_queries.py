"""refunds/queries.py: the statuses raw SQL names come from the choices, each set decides about
every status; "needs a worker" picks what it says."""

from __future__ import annotations

import itertools
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from core.sql import literal
from refunds import queries, statuses
from refunds.models import Charge, Decision, Email, Fork, Ticket
from tests.conftest import make_order

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("decided", "choices"),
    [
        (statuses.TICKET_LEASABLE, Ticket.Status),
        (statuses.TICKET_WORK_LEFT, Ticket.Status),
        (statuses.CHARGE_HOLDS_BALANCE, Charge.Status),
    ],
)
def test_each_status_set_decides_about_every_status(decided, choices):
    # A new status fails here until someone says how the raw SQL treats it.
    assert set(decided) == set(choices)


def test_the_outbox_sql_was_written_for_every_email_status():
    assert statuses.EMAIL_KNOWN == set(Email.Status)
    assert statuses.DECISION_KNOWN == set(Decision.Answer)


def test_the_sets_agree_with_the_models_own_words():
    assert {s for s, ok in statuses.TICKET_LEASABLE.items() if not ok} == {
        *Ticket.FINAL,
        Ticket.Status.FAILED,
    }
    assert {s for s, ok in statuses.TICKET_WORK_LEFT.items() if ok} <= set(Ticket.OPEN)


def test_every_status_literal_in_raw_sql_is_a_choice():
    statuses = (Ticket.Status, Charge.Status, Charge.ProcessorStatus, Email.Status)
    values = {*(s for kind in statuses for s in kind), *Decision.Answer}
    named = set(re.findall(r"'([a-z_]+)'", " ".join(vars(queries)[n] for n in _sql_names())))
    assert named and named <= values


def _sql_names() -> list[str]:
    return [n for n, v in vars(queries).items() if n.isupper() and isinstance(v, str)]


RAW_SQL_MODULES = [
    "refunds/lease.py",
    "refunds/runner.py",
    "refunds/money.py",
    "refunds/mail.py",
    "refunds/outbox.py",
]
STATUS_WORDS = {*Ticket.Status, *Charge.Status, *Email.Status, *Decision.Answer}


MODEL_MODULES = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "refunds/models").glob("*.py"))]


@pytest.mark.parametrize("module", [*RAW_SQL_MODULES, *MODEL_MODULES])
def test_no_raw_sql_spells_a_status(module):
    text = (ROOT / module).read_text()
    quoted = {f"'{word}'" for word in STATUS_WORDS}
    found = [q for q in quoted if q in text]
    assert found == [], f"{module} writes {found} by hand; use refunds/queries.py"


def test_a_literal_refuses_what_is_not_a_plain_choice():
    with pytest.raises(ValueError):
        literal("it's")


@pytest.fixture
def every_case(db, manager) -> list[Ticket]:
    """A ticket for each status × lease (none, live, lapsed) × answer (none, a decision or a fork
    waiting, one applied, one refused)."""
    now = timezone.now()
    leases = [None, now + timedelta(minutes=5), now - timedelta(minutes=5)]
    answers = ["none", "decision", "fork", "applied", "refused"]
    tickets = []
    for n, (status, expires, answer) in enumerate(
        itertools.product(Ticket.Status, leases, answers)
    ):
        ticket = Ticket.objects.create(
            thread_id=f"case-{n}",
            order=make_order(f"Q{n}"),
            status=status,
            lease_expires_at=expires,
            pending_interrupt_id=f"i{n}",
        )
        if answer in ("decision", "applied", "refused"):
            Decision.objects.create(
                ticket=ticket,
                interrupt_id=f"i{n}",
                reviewer=manager,
                answer="approve",
                applied_at=now if answer == "applied" else None,
                refused_reason="no longer waits" if answer == "refused" else "",
            )
        if answer == "fork":
            Fork.objects.create(ticket=ticket, by=manager, amount_cents=100, reason="typo")
        tickets.append(ticket)
    return tickets


def test_needing_worker_takes_lapsed_work_and_waiting_answers_but_not_failed(every_case):
    picked = set(Ticket.objects.needing_worker())
    for ticket in every_case:
        decision = ticket.decisions.first()
        waiting = bool(ticket.forks.exists()) or (
            decision is not None and decision.applied_at is None and not decision.refused_reason
        )
        lapsed = ticket.lease_expires_at is None or ticket.lease_expires_at < timezone.now()
        work_left = ticket.status in (Ticket.Status.NEW, Ticket.Status.RUNNING)
        wanted = lapsed and (work_left or (waiting and ticket.status != Ticket.Status.FAILED))
        assert (ticket in picked) == wanted, (ticket.status, ticket.lease_expires_at, decision)


@pytest.mark.parametrize(
    ("model", "name"),
    [
        (Ticket, "grantable"),
        (Ticket, "fork_waiting"),
        (Ticket, "refund_failed_waiting"),
        (Ticket, "answer_waiting"),
        (Decision, "unapplied"),
    ],
)
def test_a_named_rule_compiled_once_is_the_rule_its_queryset_compiles_now(db, model, name):
    once = queries.named_rule(model, name)
    assert once == queries.rule(getattr(model.objects, name)())
    assert queries.named_rule(model, name) == once
