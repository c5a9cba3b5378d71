"""A slow mail server stalls one email, never the desk (DESIGN 6c: no network wait inside a
database transaction). On SQLite a write transaction holds the whole database: an outbox that
waited for the server's answer to the final "." inside one made every lease renewal, decision and
run on the machine wait with it, and renewals gave up (leases lost, runs drained).

Real processes: two Celery workers on the SQLite test database, a real SMTP server that answers
one ticket's final "." after SMTP_DELAY seconds, other tickets decided meanwhile. Counted where it
lands: each message once at the server; no lease lost in the workers' logs or the lease epochs."""

from __future__ import annotations

import statistics
import time

import pytest
from django.conf import settings

from refunds import services
from refunds.models import Email, Ticket
from tests.conftest import make_order, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        settings.IS_POSTGRES, reason="the database-wide write lock is SQLite's (6c holds on both)"
    ),
]

SMTP_DELAY = 8.0  # the server holds its answer to the final "." this long
LEASE = 12  # renewed every 4 s, each renewal bounded to 2 s: a stalled database loses it
OTHERS = 5  # tickets decided while the slow message waits, and as many before it


def status(ticket: Ticket) -> str:
    return Ticket.objects.values_list("status", flat=True).get(pk=ticket.pk)


def decide_and_time(
    tickets: list[Ticket], reviewer, *, every: float = 0.8
) -> tuple[list[float], float]:
    """Approve each ticket, `every` seconds apart: the seconds from each decision to `refunded`,
    and when (time.monotonic()) the last decision was made."""
    decided: dict[int, float] = {}
    refunded: dict[int, float] = {}
    pending = list(tickets)
    deadline = time.monotonic() + 60
    while len(refunded) < len(tickets):
        assert time.monotonic() < deadline, f"not refunded: {set(decided) - set(refunded)}"
        now = time.monotonic()
        if pending and (not decided or now >= max(decided.values()) + every):
            ticket = pending.pop(0)
            decided[ticket.pk] = now  # the reviewer's click: a decision that waits counts too
            ticket.refresh_from_db()
            services.ticket_decide(
                ticket=ticket,
                interrupt_id=ticket.pending_interrupt_id,
                reviewer=reviewer,
                orders=services.review_answers(ticket, answer="approve"),
            )
        for pk in set(decided) - set(refunded):
            if Ticket.objects.filter(pk=pk, status="refunded").exists():
                refunded[pk] = time.monotonic()
        time.sleep(0.05)
    return [refunded[pk] - decided[pk] for pk in decided], max(decided.values())


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def test_a_mail_server_slow_to_answer_stalls_no_lease_and_no_other_ticket(
    workers, sinks, agent, admin_user
):
    env = {"REFUNDS_LEASE_SECONDS": str(LEASE), "EMAIL_TIMEOUT": str(SMTP_DELAY + 4)}
    started = [workers(name, env=env) for name in ("w1", "w2")]
    orders = [make_order(f"20{i:02d}", name=f"Customer{i} Test") for i in range(2 * OTHERS + 1)]
    tickets = [services.ticket_open(order_number=o.number, opened_by=agent) for o in orders]
    slow, before, during = tickets[0], tickets[1 : OTHERS + 1], tickets[OTHERS + 1 :]
    wait_for(
        lambda: all(status(t) == "awaiting_review" for t in tickets),
        timeout=60,
        what="every review",
    )

    def told(failed: AssertionError) -> AssertionError:  # what the workers said, to see why
        tails = "".join(f"\n--- {w}:\n{w.output()[-4000:]}" for w in started)
        return AssertionError(f"{failed}{tails}")

    try:
        baseline, _ = decide_and_time(before, admin_user)
    except AssertionError as failed:
        raise told(failed) from None

    sinks.smtp.slow(SMTP_DELAY, key_prefix=slow.thread_id)
    slow.refresh_from_db()
    services.ticket_decide(
        ticket=slow,
        interrupt_id=slow.pending_interrupt_id,
        reviewer=admin_user,
        orders=services.review_answers(slow, answer="approve"),
    )
    wait_for(lambda: sinks.smtp.ended_for(slow.thread_id), timeout=30, what="the slow final '.'")
    held_at = time.monotonic()
    try:
        while_held, last_decision = decide_and_time(during, admin_user)
    except AssertionError as failed:
        raise told(failed) from None
    wait_for(lambda: status(slow) == "refunded", timeout=30, what="the slow ticket")

    print(
        f"\ndecision -> refunded of the other tickets, p95: {p95(baseline):.2f} s with a fast "
        f"mail server, {p95(while_held):.2f} s while one message waited {SMTP_DELAY:g} s for "
        f"its answer (max {max(while_held):.2f} s)"
    )
    assert sinks.smtp.keys() == {f"{t.thread_id}:email": 1 for t in tickets}
    assert set(Email.objects.values_list("status", flat=True)) == {"sent"}
    logs = "".join(w.output() for w in started)
    for sign in ("lease epoch", "renewal failed", "database is locked", "run stopped"):
        assert sign not in logs, f"{sign!r} in the workers' logs"
    # Two runs per ticket (to the review, then to the refund), each under its own epoch: a
    # third epoch would be a takeover.
    assert dict(Ticket.objects.values_list("pk", "lease_epoch")) == {t.pk: 2 for t in tickets}
    assert p95(while_held) < SMTP_DELAY / 2, (baseline, while_held)
    assert last_decision - held_at < SMTP_DELAY  # decided while the server held its answer
