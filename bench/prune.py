"""What `manage.py prune` saves: checkpoint bytes of finished threads before and after, and how
long the history page takes on one of them.

    .venv/bin/python bench/prune.py                  # 40 refunded tickets on SQLite
    .venv/bin/python bench/prune.py --tickets 100 --forks 1

Each ticket runs in this process through the real runner (open, review, approve, charge, email;
with --forks, a fork before the approval), on a fresh SQLite data folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from io import StringIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import prepare_environment  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=40)
    parser.add_argument("--forks", type=int, default=0, choices=[0, 1])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prepare_environment("sqlite", Path(tmp), LOG_LEVEL="ERROR", ALLOWED_HOSTS="testserver")
        import django

        django.setup()
        from datetime import date

        from django.contrib.auth.models import Group, User
        from django.core.management import call_command
        from django.test import Client

        from refunds import enqueue, runner, services
        from refunds.models import Order, Ticket
        from refunds.persistence import storage

        call_command("migrate", verbosity=0)
        enqueue.wake = lambda ticket_id: None  # advanced here, in this process
        admin = User.objects.create_superuser("admin", password="x")
        admin.groups.add(Group.objects.get_or_create(name="Admins")[0])
        for n in range(args.tickets):
            Order.objects.create(
                number=str(5000 + n),
                customer_name=f"Customer {n}",
                customer_email=f"c{n}@example.com",
                promised_on=date(2026, 11, 2),
                delivered_on=date(2026, 11, 6),
                shipping_fee_cents=699,
            )
            ticket = services.ticket_open(order_number=str(5000 + n), opened_by=admin)
            runner.advance(ticket.pk)
            ticket.refresh_from_db()
            if args.forks:
                services.ticket_fork(ticket=ticket, amount_cents=500, reason="bench", by=admin)
                runner.advance(ticket.pk)
                ticket.refresh_from_db()
            services.ticket_decide(
                ticket=ticket,
                interrupt_id=ticket.pending_interrupt_id,
                orders=services.review_answers(ticket, answer="approve"),
                reviewer=admin,
            )
            assert runner.advance(ticket.pk) == "refunded"
        tickets = list(Ticket.objects.order_by("pk"))
        sizes = [storage.checkpoint_rows(t.thread_id) for t in tickets]
        before = sum(storage.thread_bytes(t.thread_id) for t in tickets)
        client = Client()
        client.force_login(admin)

        def page_ms() -> float:
            started = time.perf_counter()
            response = client.get(f"/tickets/{tickets[0].pk}/history/")
            assert response.status_code == 200, response.status_code
            return (time.perf_counter() - started) * 1000

        page_before = min(page_ms() for _ in range(5))
        out = StringIO()
        started = time.perf_counter()
        call_command("prune", "--older-than", "0", "--no-progress", stdout=out)
        took = time.perf_counter() - started
        after = sum(storage.thread_bytes(t.thread_id) for t in tickets)
        page_after = min(page_ms() for _ in range(5))
        per = sum(len(s) for s in sizes) / len(sizes)
        print(out.getvalue().strip())
        print(f"tickets {len(tickets)}, checkpoints per thread {per:.1f} before, 1 after")
        print(f"bytes {before:,} -> {after:,} ({after / before:.0%}); prune took {took:.2f} s")
        print(f"history page {page_before:.1f} ms -> {page_after:.1f} ms (best of 5)")


if __name__ == "__main__":
    main()
