"""Server time and SQL queries of the review desk's pages (queue, ticket, tickets search, audit),
small data vs large.

    .venv/bin/python bench/pages.py   # 1,000 and 100,000 tickets, SQLite and PostgreSQL
    .venv/bin/python bench/pages.py --backends sqlite --sizes 1000,20000 --requests 100
    .venv/bin/python bench/pages.py --backends sqlite --sizes 10000 --cards kept,none
    .venv/bin/python bench/pages.py --sizes 100000 --lines 0,4   # four lines per order, beside none

`--cards none` runs the pages with the queue's card cache (reviews/rows.py) turned off (Django's
DummyCache), so `--cards kept,none` measures what the cache pays, side by side in one run.
`--lines 4` gives every order four lines (issue 29) and every pending review the proposal a
damaged item calls for (one vase of the four, its card listing the four with quantity fields);
`--lines 0,4` runs both, side by side in one run: a card with lines against one without.

Each (backend, size) gets a fresh database (a temporary SQLite file, or the bench_refunds
PostgreSQL database) holding `size` tickets of which a tenth wait on a review; the finished ones
carry their decision, charge and email rows. Pages are fetched with Django's test client (the
whole server side: middleware, view, queries, templates) with DEBUG off; each page's query count
must be the same at every size. Results land in bench/results/pages-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    drop_postgres_db,
    machine,
    pct,
    prepare_environment,
    say,
    write_results,
)

PENDING_SHARE = 0.1
ADMIN_CHANGELIST = "admin changelist (admin)"
ADMIN_SEARCH = "admin changelist search (admin)"
# The anchors (issue 34): each desk page's p50 over Django admin's changelist of the same tickets
# (the page a team would use instead), measured in the same run: (page, anchor, at most).
TARGETS = [
    ("queue (agent)", ADMIN_CHANGELIST, 1.0),
    ("queue (manager)", ADMIN_CHANGELIST, 1.0),
    ("tickets page (agent)", ADMIN_CHANGELIST, 0.8),
    ("tickets search name (manager)", ADMIN_SEARCH, 0.8),
    ("tickets search order (manager)", ADMIN_SEARCH, 0.8),
    ("queue poll unchanged (agent)", ADMIN_CHANGELIST, 0.2),
]


def prepare_pages_environment(backend: str, data_dir: Path) -> None:
    prepare_environment(
        backend,
        data_dir,
        DEBUG="false",
        SECRET_KEY="bench-only-secret-key-bench-only-secret-key",
        ALLOWED_HOSTS="testserver",
        LOG_LEVEL="ERROR",
    )  # fakes allowed by prepare_environment: the pages carry the banner, as a staging box's do


# The four lines of an order in `--lines 4` (title, SKU, unit price in cents, quantity).
LINES = [
    ("Ceramic vase", "VASE-01", 2400, 2),
    ("Table lamp", "LAMP-02", 4500, 1),
    ("USB-C charger", "CHG-65", 2900, 1),
    ("Linen shirt", "SHIRT-M", 3500, 3),
]


def fill(size: int, lines: int = 0) -> dict:
    """`size` tickets, a tenth pending, the rest finished with their rows; with `lines`, each
    order holds that many lines and each pending review proposes one of them (a damaged vase).
    Returns sample ids."""
    from datetime import date, timedelta

    from django.contrib.auth.models import Group, User
    from django.utils import timezone

    from refunds import policy
    from refunds.flow.nodes import review_request
    from refunds.flow.nodes.common import reason_of
    from refunds.models import AuditEvent, Charge, Decision, Email, Order, OrderLine, Ticket

    agent = User.objects.create_user("agent", password="x")
    agent.groups.add(Group.objects.get_or_create(name="Support agents")[0])
    manager = User.objects.create_user("manager", password="x")
    manager.groups.add(Group.objects.get_or_create(name="Managers")[0])
    admin = User.objects.create_superuser("admin", password="x")  # Django admin's changelist
    promised = date(2026, 11, 2)
    orders = Order.objects.bulk_create(
        Order(
            number=f"P{i:05d}",
            customer_name=f"Customer {i}",
            customer_email=f"customer{i}@example.com",
            promised_on=promised,
            delivered_on=promised + timedelta(days=3),
            shipping_fee_cents=500 + (i * 37) % 4500,
        )
        for i in range(size)  # one order per ticket: an order has at most one open ticket
    )
    if lines:
        bought = LINES[:lines]
        each = sum(unit * quantity for _, _, unit, quantity in bought)
        for start in range(0, size, 5000):
            chunk = orders[start : start + 5000]
            OrderLine.objects.bulk_create(
                OrderLine(
                    order=order,
                    line_id=f"{order.number}-{n}",
                    sku=sku,
                    title=title,
                    unit_price_cents=unit,
                    quantity=quantity,
                )
                for order in chunk
                for n, (title, sku, unit, quantity) in enumerate(bought)
            )
            for order in chunk:
                order.total_cents = order.paid_cents = each + order.shipping_fee_cents
            Order.objects.bulk_update(chunk, ["total_cents", "paid_cents"])
        say(f"    {size * lines:,} order lines")
    pending_every = round(1 / PENDING_SHARE)
    batch: list[Ticket] = []
    for i in range(size):
        order = orders[i]
        fee = order.shipping_fee_cents
        role = policy.review_role(fee, flagged=False, limit_cents=policy.agent_limit_cents())
        ticket = Ticket(
            thread_id=f"refund-{order.number}-{i:08x}",
            order=order,
            note="late",
            opened_by=agent if i % 3 == 0 else manager,
            amount_cents=fee,
            required_role=role,
            nodes_run=["lookup", "fraud_check", "history_check", "check_policy", "triage"],
        )
        if i % pending_every == 0:
            facts = order.facts()
            state = {
                "order": facts,
                "amount_cents": fee,
                "late_by_days": 3,
                "required_role": role,
                "note": "late",
                "notes": ["Order facts.", "Delivered 3 days late."],
            }
            if lines:  # a review of an order with lines: half a damaged vase, half lateness
                damaged = (i // pending_every) % 2 == 0
                state |= lined_review(order.number, damaged, reason_of)
                fee = ticket.amount_cents = state["amount_cents"]
                role = ticket.required_role = state["required_role"]
            ticket.status = Ticket.Status.AWAITING_REVIEW
            ticket.review_since = timezone.now() - timedelta(minutes=i % 90)
            ticket.pending_interrupt_id = f"{i:032x}"
            ticket.pending_payload = review_request(state)
            ticket.next_nodes = ["approve"]
        else:
            ticket.status = Ticket.Status.REFUNDED
            ticket.nodes_run += ["approve", "charge_card", "email"]
            ticket.outcome_reason = "Refunded."
        batch.append(ticket)
        if len(batch) == 5000 or i == size - 1:
            Ticket.objects.bulk_create(batch)
            batch = []
            say(f"    {i + 1:,}/{size:,} tickets")
    refunded = Ticket.objects.filter(status=Ticket.Status.REFUNDED)
    rows = list(refunded.values_list("pk", "amount_cents", "thread_id", "order_id"))
    for start in range(0, len(rows), 5000):
        chunk = rows[start : start + 5000]
        Decision.objects.bulk_create(
            Decision(ticket_id=pk, interrupt_id=f"d-{pk}", reviewer=agent, answer="approve")
            for pk, _, _, _ in chunk
        )
        Charge.objects.bulk_create(
            Charge(
                ticket_id=pk,
                order_id=order_id,
                idempotency_key=f"{key}:charge_card:{cents}",
                amount_cents=cents,
                receipt=f"rcpt_{pk:012d}",
                status="succeeded",
            )
            for pk, cents, key, order_id in chunk
        )
        AuditEvent.objects.bulk_create(
            AuditEvent(ticket_id=pk, actor=agent, action="approve", answer={"answer": "approve"})
            for pk, _, _, _ in chunk
        )
        Email.objects.bulk_create(
            Email(
                ticket_id=pk,
                key=f"{key}:email",
                to="c@example.com",
                subject="Your refund",
                body="Refunded.",
            )
            for pk, _, key, _ in chunk
        )
    # Decided in the past, as a desk's history is: decisions stamped "now" would all read as
    # decided moments ago (the queue shows those for some seconds as lines in their places).
    Decision.objects.update(decided_at=timezone.now() - timedelta(days=1))
    say(f"    {len(rows):,} finished tickets with their decision, charge and email")
    from django.db import connection

    with connection.cursor() as cursor:
        # Fresh statistics, as autovacuum would have after a while; on PostgreSQL also the
        # visibility map its vacuum keeps, without which no index-only scan skips the table.
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    awaiting = Ticket.objects.awaiting()
    return {
        "agent": agent.pk,
        "manager": manager.pk,
        "admin": admin.pk,
        "pending_ticket": awaiting.filter(required_role="agent").order_by("-id").first().pk,
        "refunded_ticket": refunded.filter(required_role="agent").order_by("-id").first().pk,
        "pending": awaiting.count(),
    }


def lined_review(number: str, damaged: bool, reason_of) -> dict:
    """The state of a one-order ticket whose check proposed what a damaged vase (a manager's
    review) or a late delivery (the shipping fee: an agent's, within their limit) calls for, as
    refunds/flow/nodes/checks.py builds it (the order's facts with its lines, the policy's
    parts), for review_request to turn into the card's payload."""
    from refunds import policy
    from refunds.flow import parts as refund_parts
    from refunds.models import Order

    facts = Order.objects.get(number=number).facts()
    reason = policy.DAMAGED if damaged else policy.LATE_DELIVERY
    words = "one vase arrived smashed" if damaged else "my parcel came three days late"
    state = {"reason": reason, "order": facts}
    parts, why = policy.proposed_parts(reason_of(state), facts, words, late_by_days=3)
    amount = refund_parts.total(parts)
    check = {
        "number": number,
        "order": facts,
        "balance_cents": facts["paid_cents"],
        "amount_cents": amount,
        "parts": parts,
        "parts_why": why,
        "late_by_days": 3,
        "refundable": True,
        "declined_reason": "",
        "flags": [],
        "notes": [why],
        "history": {"refunds": 0, "total_cents": 0},
    }
    role = policy.review_role(
        amount, flagged=False, limit_cents=policy.agent_limit_cents(), reason=reason
    )
    return {
        **state,
        "order_numbers": [number],
        "checks": {number: check},
        "amount_cents": amount,
        "required_role": role,
        "note": words,
    }


class Breakdown:
    """Where one request's server time goes: SQL statements (timed at the cursor) and template
    rendering (the outermost Template.render, less the SQL run inside it, e.g. a lazy queryset)."""

    def __init__(self) -> None:
        self.sql = 0.0
        self.render = 0.0
        self._depth = 0
        self._sql_in_render = 0.0

    def __enter__(self) -> Breakdown:
        from django.db import connection
        from django.template import base

        self._wrapper = connection.execute_wrapper(self._time_sql)
        self._wrapper.__enter__()
        self._original = original = base.Template.render
        breakdown = self

        def render(template, context):
            if breakdown._depth:
                return original(template, context)
            breakdown._depth += 1
            sql_before, started = breakdown.sql, time.perf_counter()
            try:
                return original(template, context)
            finally:
                breakdown._depth -= 1
                spent = (time.perf_counter() - started) * 1000
                breakdown.render += spent - (breakdown.sql - sql_before)

        base.Template.render = render  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc) -> None:
        from django.template import base

        base.Template.render = self._original  # type: ignore[method-assign]
        self._wrapper.__exit__(*exc)

    def _time_sql(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.sql += (time.perf_counter() - started) * 1000


def measure(
    client, url: str, requests: int, headers: dict | None = None, status: int = 200
) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(10):  # warm caches and the connection
        assert client.get(url, headers=headers or {}).status_code == status
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, headers=headers or {})
    count = len(queries)  # now: the next request's request_started empties the query log
    assert response.status_code == status, response.status_code
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        client.get(url, headers=headers or {})
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    # A second, shorter pass split into SQL and rendering (the timers add a little of their own).
    sql, render, total = [], [], []
    for _ in range(max(requests // 4, 5)):
        started = time.perf_counter()
        with Breakdown() as spent:
            client.get(url, headers=headers or {})
        total.append((time.perf_counter() - started) * 1000)
        sql.append(spent.sql)
        render.append(spent.render)
    return {
        "p50_ms": pct(times, 50),
        "p95_ms": pct(times, 95),
        "queries": count,
        "bytes": len(response.content),
        "split_p50_ms": {
            "total": pct(sorted(total), 50),
            "sql": pct(sorted(sql), 50),
            "render": pct(sorted(render), 50),
        },
    }


def unchanged_poll(client, url: str) -> str:
    """The queue's poll as the page sends it when nothing changed (bench/queue_client.py)."""
    from urllib.parse import urlencode

    from bench.queue_client import Screen

    screen = Screen()
    screen.load(client.get(url).content.decode())
    return f"{url}?{urlencode(screen.params())}"


def report(label: str, name: str, figures: dict) -> None:
    split = figures["split_p50_ms"]
    say(
        f"{label}: {name:<31} p50 {figures['p50_ms']:6.1f} ms  p95 {figures['p95_ms']:6.1f} ms  "
        f"{figures['queries']:2d} queries  (of {split['total']:.1f} ms: SQL {split['sql']:.1f}, "
        f"rendering {split['render']:.1f})"
    )


def run_one(backend: str, size: int, requests: int, cards: str = "kept", lines: int = 0) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix=f"bench-pages-{backend}-"))
    prepare_pages_environment(backend, data_dir)
    import django

    django.setup()
    if cards == "none":  # before the first use of the cache: every card rendered each time
        from django.conf import settings

        settings.CACHES["cards"] = {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    from django.contrib import admin

    from refunds.models import Ticket
    from reviews.views.common import TICKETS_PAGE

    # The anchor shows as many rows as the desk's tickets page (its own default is 100).
    admin.site._registry[Ticket].list_per_page = TICKETS_PAGE
    label = f"{backend} {size:,}" + (" no card cache" if cards == "none" else "")
    label += f" {lines} lines" if lines else ""
    try:
        say(f"{label}: filling")
        ids = fill(size, lines)
        pages = {
            "queue (agent)": ("agent", "/", None),
            "queue (manager)": ("manager", "/", None),
            "queue covering (manager)": ("manager", "/?cover=1", None),
            # A poll from a page that shows no card yet: every card drawn, out of band.
            "queue rows fragment (agent)": (
                "agent",
                "/",
                {"HX-Request": "true", "HX-Target": "queue-foot"},
            ),
            "ticket pending (agent)": ("agent", f"/tickets/{ids['pending_ticket']}/", None),
            "ticket refunded (agent)": ("agent", f"/tickets/{ids['refunded_ticket']}/", None),
            "tickets page (agent)": ("agent", "/tickets/", None),
            "tickets page 3 (manager)": ("manager", "/tickets/?page=3", None),
            "tickets filtered (manager)": (
                "manager",
                "/tickets/?status=awaiting_review&sort=amount_high&min_amount=10",
                None,
            ),
            "tickets search order (manager)": ("manager", "/tickets/?q=P00042", None),
            # Found at both sizes (Customer 424, and at 100,000 also 4240-4249 and 42400-42499).
            "tickets search name (manager)": ("manager", "/tickets/?q=Customer+424", None),
            "audit page (manager)": ("manager", "/audit/", None),
            # The anchor: Django admin's changelist of the same tickets (refunds/admin/tickets.py's
            # TicketAdmin, its filters and search as they are), and its search. Its search
            # fields are the thread id and the linked orders' numbers: P00042 is in the ids.
            ADMIN_CHANGELIST: ("admin", "/admin/refunds/ticket/", None),
            ADMIN_SEARCH: ("admin", "/admin/refunds/ticket/?q=P00042", None),
        }
        out: dict = {
            "backend": backend,
            "tickets": size,
            "cards": cards,
            "lines": lines,
            "pending": ids["pending"],
            "pages": {},
        }
        poll = {"HX-Request": "true", "HX-Target": "queue-foot"}
        for name, (user, url, headers) in pages.items():
            client = Client()
            client.force_login(User.objects.get(pk=ids[user]))
            out["pages"][name] = measure(client, url, requests, headers)
            report(label, name, out["pages"][name])
            if name == "queue (agent)":  # the rows poll that finds nothing changed: a 204
                name = "queue poll unchanged (agent)"
                url = unchanged_poll(client, "/")
                out["pages"][name] = measure(client, url, requests, poll, status=204)
                report(label, name, out["pages"][name])
        return out
    finally:
        from django.db import connections

        connections.close_all()
        if backend == "postgres":
            drop_postgres_db()
        shutil.rmtree(data_dir, ignore_errors=True)


def anchors(run: dict) -> list[dict]:
    """Each target's ratio in one (backend, size) run: page p50 over its anchor's p50."""
    out = []
    for page, anchor, most in TARGETS:
        if page not in run["pages"] or anchor not in run["pages"]:
            continue
        ratio = run["pages"][page]["p50_ms"] / run["pages"][anchor]["p50_ms"]
        out.append(
            {
                "backend": run["backend"],
                "tickets": run["tickets"],
                "cards": run["cards"],
                "page": page,
                "anchor": anchor,
                "ratio": ratio,
                "target": most,
                "met": ratio <= most,
            }
        )
    return out


def print_anchors(backend: str, run: dict) -> None:
    base = run["pages"][ADMIN_CHANGELIST]["p50_ms"]
    search = run["pages"][ADMIN_SEARCH]["p50_ms"]
    print(
        f"  {run['tickets']:,} tickets against Django admin's changelist (p50 {base:.1f} ms; "
        f"its search {search:.1f} ms), same run:"
    )
    for a in anchors(run):
        print(
            f"    {a['page']:<31} {a['ratio']:5.2f}x {a['anchor'].split(' (')[0]:<24} "
            f"target <= {a['target']:.1f}x: {'met' if a['met'] else 'MISSED'}"
        )


# Issue 29: a card with four lines makes the queue at most this much slower than one without.
LINES_TARGET = 1.2
LINES_PAGES = ("queue (agent)", "queue (manager)", "ticket pending (agent)")


def print_lines(base: dict, lined: dict) -> None:
    """Each page's p50 with lines over without, raw and over each run's own admin changelist
    (the two runs are minutes apart on a shared machine: the anchor takes out its drift)."""
    print(
        f"  {base['tickets']:,} tickets, orders of {lined['lines']} lines against "
        f"{base['lines']} (same run; 'anchored' divides each by its run's admin changelist):"
    )
    for page in LINES_PAGES:
        was, now = base["pages"][page]["p50_ms"], lined["pages"][page]["p50_ms"]
        anchored = (now / lined["pages"][ADMIN_CHANGELIST]["p50_ms"]) / (
            was / base["pages"][ADMIN_CHANGELIST]["p50_ms"]
        )
        target = (
            f"target <= {LINES_TARGET:.1f}x: {'met' if anchored <= LINES_TARGET else 'MISSED'}"
            if page.startswith("queue")
            else ""
        )
        print(
            f"    {page:<31} p50 {was:6.1f} -> {now:6.1f} ms {now / was:5.2f}x, "
            f"anchored {anchored:5.2f}x {target}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per page")
    parser.add_argument("--cards", default="kept", help="kept, none, or kept,none side by side")
    parser.add_argument(
        "--lines", default="0", help="lines per order: 0, 4, or 0,4 side by side (at most 4)"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        backend, size, cards, lines = args.one.split(":")
        figures = run_one(backend, int(size), args.requests, cards, int(lines))
        Path(args.out).write_text(json.dumps(figures))
        return

    info = machine()
    say(
        f"pages: {args.backends} x {args.sizes} tickets, {args.requests} requests per page; "
        f"{info.get('cpus')} CPUs, Python {info['python']}"
    )
    results = []
    modes = args.cards.split(",")
    per_order = [int(n) for n in args.lines.split(",")]
    if not all(0 <= n <= len(LINES) for n in per_order):
        parser.error(f"--lines takes 0 to {len(LINES)} lines per order")
    for backend in args.backends.split(","):
        for size, cards, lines in [
            (int(size), cards, lines)
            for size in args.sizes.split(",")
            for cards in modes
            for lines in per_order
        ]:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--one",
                        f"{backend}:{size}:{cards}:{lines}",
                        "--out",
                        out.name,
                        "--requests",
                        str(args.requests),
                    ],
                    check=True,
                )
                results.append(json.loads(Path(out.name).read_text()))
    print()
    constant = {}
    for backend in args.backends.split(","):
        runs = [
            r
            for r in results
            if r["backend"] == backend and r["cards"] == modes[0] and r["lines"] == per_order[0]
        ]
        print(
            f"{backend}: "
            + "  vs  ".join(f"{r['tickets']:,} tickets ({r['pending']:,} pending)" for r in runs)
        )
        for page in runs[0]["pages"]:
            cells = "   ".join(
                f"p50 {r['pages'][page]['p50_ms']:6.1f} ms p95 "
                f"{r['pages'][page]['p95_ms']:6.1f} ms {r['pages'][page]['queries']:2d} q"
                for r in runs
            )
            same = len({r["pages"][page]["queries"] for r in runs}) == 1
            constant[f"{backend} {page}"] = same
            print(f"  {page:<31} {cells}   queries constant: {'yes' if same else 'NO'}")
        for kept_run in runs if modes == ["kept", "none"] else []:
            none_run = next(
                r
                for r in results
                if (r["backend"], r["tickets"], r["cards"], r["lines"])
                == (backend, kept_run["tickets"], "none", kept_run["lines"])
            )
            for page in ("queue (agent)", "queue (manager)", "queue rows fragment (agent)"):
                kept, none = kept_run["pages"][page]["p50_ms"], none_run["pages"][page]["p50_ms"]
                print(
                    f"  {kept_run['tickets']:,} {page}: p50 {kept:.1f} ms kept, {none:.1f} ms "
                    f"with no card cache: the cache saves {1 - kept / none:.0%}"
                )
        for base_run in runs:
            for lined in (
                r
                for r in results
                if (r["backend"], r["tickets"], r["cards"])
                == (backend, base_run["tickets"], modes[0])
                and r["lines"] != base_run["lines"]
            ):
                print_lines(base_run, lined)
        for run in runs:
            print_anchors(backend, run)
    path = write_results(
        "pages",
        {
            "command": " ".join(["python", *sys.argv]),
            "machine": info,
            "settings": vars(args),
            "results": results,
            "queries_constant": constant,
            "anchors": [anchor for r in results for anchor in anchors(r)],
        },
    )
    say(f"wrote {path}")


if __name__ == "__main__":
    main()
