"""The managers' dashboard (SVG plots from the database) and /metrics (Prometheus)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta

import pytest
from django.utils import timezone

from refunds.models import Charge, Decision, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review


@pytest.fixture
def history(db, manager):
    """Two weeks of a small desk: refunds paid, a decline, a rejection, a review waiting."""
    now = timezone.now()
    for day in range(6):
        order = make_order(f"70{day}", fee_cents=500 + day * 100)
        ticket = Ticket.objects.create(
            thread_id=f"h{day}",
            order=order,
            status="refunded",
            amount_cents=order.shipping_fee_cents,
        )
        decided = Decision.objects.create(
            ticket=ticket, interrupt_id=f"i{day}", reviewer=manager, answer="approve"
        )
        when = now - timedelta(days=day)
        Ticket.objects.filter(pk=ticket.pk).update(
            created_at=when - timedelta(minutes=30 + day), updated_at=when
        )
        Decision.objects.filter(pk=decided.pk).update(decided_at=when - timedelta(minutes=5))
        Charge.objects.create(
            ticket=ticket,
            order=order,
            idempotency_key=f"k{day}",
            amount_cents=order.shipping_fee_cents,
            status="succeeded",
            receipt=f"r{day}",
            settled_at=when,
        )
    Ticket.objects.create(thread_id="d", order=make_order("7100"), status="declined")
    Ticket.objects.create(thread_id="r", order=make_order("7101"), status="rejected")
    awaiting_review(make_order("7102", fee_cents=699))


def test_the_dashboard_plots_the_desk_from_the_database(client, manager, history):
    client.force_login(manager)
    page = client.get("/dashboard/")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count("<svg") == 4
    for title in (
        "Reviews waiting",
        "Time to decision",
        "Refunds paid per day",
        "refunded, declined, rejected",
    ):
        assert title in html
    bars = re.findall(r'<rect class="bar ([\w-]+)"[^>]*><title>([^<]+)</title>', html)
    paid = [t for css, t in bars if css == "bar-ok" and "$" in t]
    assert len(paid) == 6 and any("$5.00" in t for t in paid)  # today's $5.00 refund
    assert any(css == "bar-declined" for css, _ in bars) and any(
        css == "bar-bad" for css, _ in bars
    )
    assert any(css == "bar-a" for css, _ in bars)  # the waiting review
    assert "$45.00" in html  # refunded over the period: $5 + $6 + $7 + $8 + $9 + $10
    assert " style=" not in html


def test_the_dashboard_takes_a_period(client, manager, history):
    client.force_login(manager)
    html = client.get("/dashboard/?days=7").content.decode()
    assert html.count("<title>") > 7
    assert client.get("/dashboard/?days=oops").status_code == 200  # falls back to 14


def test_the_dashboard_renders_with_no_data(client, manager):
    client.force_login(manager)
    page = client.get("/dashboard/")
    assert page.status_code == 200 and page.content.decode().count("<svg") == 4


def money_axis(html: str) -> list[str]:
    """The tick labels of the refunds chart's money axis, bottom to top."""
    chart = html.split("<figcaption>Refunds paid per day</figcaption>")[1].split("</svg>")[0]
    return re.findall(r'<text class="axis" [^>]*text-anchor="end">(\$[\d,.]+)</text>', chart)


def test_the_money_axis_reads_in_distinct_amounts_with_no_refunds(client, manager):
    client.force_login(manager)
    html = client.get("/dashboard/").content.decode()
    assert money_axis(html) == ["$0.00", "$0.25", "$0.50", "$0.75", "$1.00"]


def test_the_money_axis_follows_the_refunds_paid(client, manager, history):
    client.force_login(manager)
    html = client.get("/dashboard/").content.decode()
    assert money_axis(html) == ["$0.00", "$2.50", "$5.00", "$7.50", "$10.00"]


# --- /metrics ------------------------------------------------------------------------------------
def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = (
        rf"^{re.escape(name)}{{{re.escape(wanted)}}} (\S+)$"
        if labels
        else rf"^{re.escape(name)} (\S+)$"
    )
    found = re.search(pattern, text, re.M)
    return float(found[1]) if found else 0.0


def test_metrics_need_a_token_or_an_admin(client, db, settings, admin_user):
    settings.METRICS_TOKEN = "scrape-" + "t" * 30
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    scraped = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {settings.METRICS_TOKEN}")
    assert scraped.status_code == 200
    assert scraped["Content-Type"].startswith("text/plain")
    client.force_login(admin_user)
    assert client.get("/metrics").status_code == 200


def test_metrics_read_the_queue_from_the_database(client, admin_user, history):
    client.force_login(admin_user)
    text = client.get("/metrics").content.decode()
    assert metric(text, "refund_desk_reviews_waiting", role="agent") == 1
    assert metric(text, "refund_desk_reviews_waiting", role="manager") == 0
    assert metric(text, "refund_desk_oldest_review_age_seconds") >= 0
    assert metric(text, "refund_desk_decisions_total", answer="approve") == 6
    assert metric(text, "refund_desk_tickets", status="refunded") == 6


def test_metrics_count_what_a_run_does_in_this_process(client, admin_user, late_order):
    from refunds import runner, services

    client.force_login(admin_user)
    before = client.get("/metrics").content.decode()
    ticket = services.ticket_open(order_number="1042")
    runner.advance(ticket.pk)
    after = client.get("/metrics").content.decode()
    name = "refund_desk_advances_total"
    assert (
        metric(after, name, outcome="awaiting_review")
        == metric(before, name, outcome="awaiting_review") + 1
    )
    count = "refund_desk_advance_duration_seconds_count"
    assert metric(after, count) == metric(before, count) + 1
    assert metric(after, "refund_desk_reviews_waiting", role="agent") == 1


@pytest.mark.slow
def test_metrics_move_when_a_worker_refunds_a_ticket(
    client, admin_user, agent, workers, late_order
):
    """A real Celery worker (its own processes, prometheus multiprocess files) runs the ticket to
    its review and, after the approval, to refunded; the web's /metrics sees what it counted."""
    from refunds import services
    from tests.conftest import wait_for

    client.force_login(admin_user)
    before = client.get("/metrics").content.decode()
    workers("w1")
    ticket = services.ticket_open(order_number="1042")
    wait_for(lambda: Ticket.objects.get(pk=ticket.pk).status == "awaiting_review", what="review")
    waiting = client.get("/metrics").content.decode()
    assert metric(waiting, "refund_desk_reviews_waiting", role="agent") == 1

    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(ticket, answer="approve"),
    )
    wait_for(lambda: Ticket.objects.get(pk=ticket.pk).status == "refunded", what="refunded")

    after = client.get("/metrics").content.decode()
    assert metric(after, "refund_desk_reviews_waiting", role="agent") == 0
    assert metric(after, "refund_desk_decisions_total", answer="approve") == 1
    latency = "refund_desk_decision_to_refunded_seconds_count"
    assert metric(after, latency) == metric(before, latency) + 1
    refunded = "refund_desk_advances_total"
    assert (
        metric(after, refunded, outcome="refunded")
        >= metric(before, refunded, outcome="refunded") + 1
    )
    assert (
        metric(after, refunded, outcome="awaiting_review")
        >= metric(before, refunded, outcome="awaiting_review") + 1
    )
    assert metric(after, "refund_desk_tickets", status="refunded") == 1


# --- the reviewer's day --------------------------------------------------------------------------
def bars(html: str, caption: str) -> dict[str, str]:
    """One chart's bars by their day label: {"Nov 29": "$12.00 refunded"}."""
    chart = html.split(f"{caption}</figcaption>")[1].split("</svg>")[0]
    return dict(re.findall(r"<title>([A-Z][a-z]{2} \d+): ([^<]+)</title>", chart))


@pytest.mark.parametrize(
    ("zone", "shown_on"),
    [("Asia/Tokyo", 1), ("UTC", 0), ("America/Los_Angeles", 0)],  # days after the UTC day
)
def test_a_refund_at_half_past_eleven_utc_counts_on_the_reviewers_own_day(
    client, manager, zone, shown_on
):
    from zoneinfo import ZoneInfo

    from core.clock import day_words

    utc_day = timezone.now().date() - timedelta(days=3)
    at = datetime.combine(utc_day, time(23, 30), tzinfo=UTC)
    order = make_order("7200", fee_cents=1200)
    ticket = Ticket.objects.create(thread_id="tz", order=order, status="refunded")
    Ticket.objects.filter(pk=ticket.pk).update(created_at=at - timedelta(minutes=20), updated_at=at)
    decided = Decision.objects.create(
        ticket=ticket, interrupt_id="tz", reviewer=manager, answer="approve"
    )
    Decision.objects.filter(pk=decided.pk).update(decided_at=at - timedelta(minutes=10))
    Charge.objects.create(
        ticket=ticket,
        order=order,
        idempotency_key="tz",
        amount_cents=1200,
        status="succeeded",
        receipt="rtz",
        settled_at=at,
    )
    client.force_login(manager)
    client.cookies["tz"] = zone
    html = client.get("/dashboard/").content.decode()
    day = day_words(utc_day + timedelta(days=shown_on), year=False)
    assert bars(html, "Refunds paid per day") == {day: "$12.00 refunded"}
    assert bars(html, "Time to decision (median minutes, by day decided)") == {
        day: "10 minutes to decide"
    }
    assert bars(html, "Tickets ended per day: refunded, declined, rejected") == {day: "1 refunded"}
    assert bars(html, "Reviews waiting at the end of each day") == {}  # opened and decided that day
    today = day_words(datetime.now(ZoneInfo(zone)).date(), year=False)
    assert re.search(rf'text-anchor="end">{today}</text>', html)  # the last day is theirs
