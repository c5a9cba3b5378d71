"""Scale out: four real worker processes share one PostgreSQL and one Redis.

Every ticket must end exactly once however the broker spreads its tasks: one charge, one sent
email and one applied decision per refund, nothing failed, no worker errors.
"""

import re
import time
from collections import Counter
from datetime import date, timedelta

import pytest
from django.conf import settings

from refunds import services
from refunds.models import Charge, Decision, Email, Order, Ticket

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not settings.IS_POSTGRES,
        reason="scale-out runs on PostgreSQL: set DATABASE_URL=postgres://... "
        "(SQLite is one machine)",
    ),
]

TICKETS = 200
WORKERS = 4
ON_TIME_EVERY = 10  # every tenth order arrived on time: declined by policy, never reviewed


def many_orders(count: int) -> list[Order]:
    promised = date(2026, 11, 2)
    return Order.objects.bulk_create(
        Order(
            number=f"S{i:05d}",
            customer_name=f"Customer {i}",
            customer_email=f"customer{i}@example.com",  # one each: no one is a repeat refunder
            promised_on=promised,
            delivered_on=promised + timedelta(days=-1 if i % ON_TIME_EVERY == 0 else 3),
            shipping_fee_cents=500 + (i * 37) % 4500,  # agent and manager amounts
        )
        for i in range(count)
    )


def decide_whatever_is_pending(reviewer, decided: set[int]) -> None:
    for ticket in Ticket.objects.awaiting().exclude(pk__in=decided):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=ticket.pending_interrupt_id,
            reviewer=reviewer,
            orders=services.review_answers(ticket, answer="approve"),
        )
        decided.add(ticket.pk)


def test_four_workers_end_two_hundred_tickets_once_each(workers, admin_user):
    started = [workers(f"w{n}") for n in range(1, WORKERS + 1)]
    orders = many_orders(TICKETS)
    tickets = [services.ticket_open(order_number=o.number, note="late") for o in orders]

    decided: set[int] = set()
    deadline = time.monotonic() + 100
    while Ticket.objects.exclude(status__in=Ticket.FINAL).exists():
        assert time.monotonic() < deadline, Counter(Ticket.objects.values_list("status", flat=True))
        assert not Ticket.objects.filter(status=Ticket.Status.FAILED).exists()
        decide_whatever_is_pending(admin_user, decided)
        time.sleep(0.05)

    declined = {t.pk for t in tickets if int(t.order.number[1:]) % ON_TIME_EVERY == 0}
    outcomes = dict(Ticket.objects.values_list("pk", "status"))
    assert {pk for pk, status in outcomes.items() if status == "declined"} == declined
    assert {pk for pk, status in outcomes.items() if status == "refunded"} == decided
    assert len(decided) == TICKETS - len(declined)

    # Exactly once: the ledger, the outbox, the decisions and the thread's own trail agree.
    assert Counter(Charge.objects.values_list("ticket_id", flat=True)) == Counter(decided)
    # One email per ticket: the refund's confirmation, or the decline's reason.
    assert Counter(
        Email.objects.filter(sent_at__isnull=False).values_list("ticket_id", flat=True)
    ) == Counter(decided | declined)
    assert Email.objects.filter(sent_at__isnull=True).count() == 0
    assert Decision.objects.filter(applied_at__isnull=True).count() == 0
    for ticket in Ticket.objects.all():
        assert ticket.last_error == "" and ticket.lease_owner == "", ticket
        trail = Counter(ticket.nodes_run)
        assert all(runs == 1 for runs in trail.values()), (ticket, ticket.nodes_run)
        assert trail["email"] == trail["settle_charges"] == (ticket.pk in decided)

    for worker in started:
        log = worker.output()
        assert "Traceback" not in log and " ERROR" not in log, log[-3000:]
    ran = {
        w.name: len(re.findall(r"advance_ticket\[[^\]]+\] succeeded", w.output())) for w in started
    }
    assert all(ran.values()), f"every worker should have taken tasks: {ran}"
