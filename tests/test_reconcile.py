"""`manage.py reconcile` (refunds/services/reconcile.py) and its daily task: the ledger beside the
processor, order by order, moving no money. Stripe is localstripe; refunds made outside the desk
are made there with no desk key, as Stripe's dashboard makes them."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.conf import settings as django_settings
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from core.clock import day_words
from devtools.localstripe import SECRET_KEY
from refunds import enqueue, money, payments, services, tasks
from refunds.flow.words import dollars
from refunds.models import Charge, OutsideRefund, PaymentDispute, ReconcileRun, Ticket
from refunds.payments import ProcessorDispute, ProcessorRefund
from refunds.payments.stripe import StripeGateway
from tests.test_outside_refunds import PAID, at_stripe, paid_order, pay
from tests.test_outside_refunds import (  # noqa: F401 - an autouse fixture: pay()'s leases
    _one_run_per_ticket as _one_run_per_ticket,
)


@pytest.fixture
def stripe_here(settings, localstripe, request):
    settings.REFUNDS_GATEWAY = "refunds.payments.stripe.StripeGateway"
    settings.STRIPE_SECRET_KEY = SECRET_KEY
    settings.STRIPE_API_BASE = localstripe.url
    payments.get_gateway.cache_clear()  # one gateway per process, built from the settings
    request.addfinalizer(payments.get_gateway.cache_clear)
    return localstripe


def reconcile(*args: str) -> tuple[int, str]:
    """The command as an operator runs it: (exit status, what it printed)."""
    out = StringIO()
    try:
        call_command("reconcile", *args, stdout=out)
    except CommandError as exc:
        return 1, out.getvalue() + str(exc)
    return 0, out.getvalue()


def a_day_ago() -> datetime:
    return timezone.now() - timedelta(days=1)


class ListsThenTheDashboardRefunds(StripeGateway):
    """The race the pre-charge check leaves: the listing answers, then (before the desk's own
    refund is created) someone refunds the payment in Stripe's dashboard."""

    stripe = None

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        listed = super().payment_refunds(payment_reference)
        self.stripe.refund_outside(payment_reference, 699)
        return listed


def test_a_dashboard_refund_made_during_a_charge_is_caught_by_reconcile(db, stripe_here):
    order = paid_order(stripe_here.payment_intent(PAID))
    racing = ListsThenTheDashboardRefunds(secret_key=SECRET_KEY, api_base=stripe_here.url)
    racing.stripe = stripe_here
    pay(racing, order, 699)  # both went through: the race this check cannot close
    assert sorted(at_stripe(stripe_here, order)) == [(699, False), (699, True)]

    status, said = reconcile()

    assert status == 1
    assert "Reconciled 1 order(s)" in said
    assert "Refunds made outside the desk: 1 ($6.99), 1 new since the last look." in said
    assert (
        f"Order {order.number} was refunded $13.98 at the processor ($6.99 by the desk, $6.99 "
        "outside the desk), $6.99 past the $6.99 the desk may refund of it" in said
    )
    assert OutsideRefund.objects.get().order == order
    assert len(stripe_here.refunds(order.payment_reference)) == 2  # it moved no money


def test_a_refund_made_at_stripe_is_recorded_and_counted_by_the_next_charge(db, stripe_here):
    order = paid_order(stripe_here.payment_intent(PAID), paid=PAID)
    pay(StripeGateway(), order, 300)
    stripe_here.refund_outside(order.payment_reference, 5000)

    status, said = reconcile()

    assert status == 0, said  # $53.00 of the $56.99 paid
    assert "Refunds made outside the desk: 1 ($50.00), 1 new" in said
    assert "Problems: 0." in said
    assert money.outside_refunds_record(order.pk, []) == 0
    [outside] = OutsideRefund.objects.all()
    assert (outside.order, outside.amount_cents) == (order, 5000)
    _, again = reconcile()
    assert "1 ($50.00), 0 new since the last look" in again


def test_a_clean_ledger_reports_no_problem_and_exits_zero(db, stripe_here):
    order = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), order, 699)
    paid_order("")  # no payment to list: not looked at

    status, said = reconcile()

    assert status == 0
    assert "Reconciled 1 order(s)" in said
    assert "1 refund(s) at the processor" in said
    assert "Problems: 0." in said


def test_an_open_dispute_is_listed_and_recorded_but_is_no_problem(db, stripe_here):
    order = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), order, 699)
    # Disputed after the desk's refund: the lookup before that charge saw none.
    disputed = stripe_here.dispute(order.payment_reference, amount_cents=PAID)
    closed = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), closed, 699)
    stripe_here.dispute_closes(stripe_here.dispute(closed.payment_reference), "won")

    status, said = reconcile()

    assert status == 0  # a dispute is the bank's, not a mismatch of the ledger
    assert "Open disputes: 1." in said
    assert (
        f"- Order {order.number}: dispute {disputed} of {dollars(PAID)} (needs_response), "
        f"opened {day_words(timezone.localdate())}. This payment is disputed: refunding it may "
        "pay the customer twice."
    ) in said
    assert "Problems: 0." in said
    assert PaymentDispute.objects.get(processor_id=disputed).order == order
    assert PaymentDispute.objects.filter(order=closed).get().status == "won"


def test_a_ledger_refund_the_processor_lacks_is_a_problem(db, stripe_here):
    order = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), order, 699)
    Charge.objects.update(receipt="re_NotAtStripe")

    status, said = reconcile()

    assert status == 1
    assert "the ledger's refund re_NotAtStripe of $6.99 (ticket" in said
    assert "is not at the processor" in said


def test_a_refund_with_the_desks_key_the_ledger_lacks_is_a_problem(db, stripe_here):
    order = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), order, 300)
    made = stripe_here.call(
        "POST",
        "/v1/refunds",
        payment_intent=order.payment_reference,
        amount="100",
        **{f"metadata[{StripeGateway.METADATA_KEY}]": "another-desk:charge_card:1:100"},
    )

    status, said = reconcile()

    assert status == 1
    assert f"refund {made['id']} of $1.00 carries the desk's key another-desk" in said
    assert OutsideRefund.objects.get().processor_id == made["id"]


class Says:
    """A processor that says what the test wants of a payment's refunds (localstripe cannot say
    `failed`, nor a second amount) and of its disputes (none unless told)."""

    def __init__(
        self, refunds: list[ProcessorRefund], disputes: list[ProcessorDispute] | None = None
    ) -> None:
        self.refunds = refunds
        self.disputes = disputes or []

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        return self.refunds

    def payment_disputes(self, payment_reference: str) -> list[ProcessorDispute]:
        return self.disputes


def test_a_desk_refund_failed_at_the_processor_is_re_read_onto_the_ledger(db, monkeypatch):
    woken: list[int] = []
    monkeypatch.setattr(enqueue, "advance_on_commit", woken.append)
    order = paid_order("pi_Reread")
    pay(payments.DemoGateway(), order, 699)
    charge = Charge.objects.get()
    failed = ProcessorRefund(
        id=charge.receipt or "",
        amount_cents=699,
        status="failed",
        desk_key=charge.idempotency_key,
        failure_reason="expired_or_canceled_card",
    )

    report = services.reconcile_payments(since=a_day_ago(), gateway=Says([failed]))

    assert report.ok, report.problems
    assert report.statuses_moved == 1
    charge.refresh_from_db()
    assert (charge.processor_status, charge.failure_reason) == (
        "failed",
        "expired_or_canceled_card",
    )
    assert woken == [charge.ticket_id]  # its ticket goes back to a manager
    assert money.refundable_cents(order) == 699


def test_a_refund_the_ledger_says_failed_and_the_processor_holds_is_a_problem(db, stripe_here):
    """A ledger row marked failed by an event that was not its refund's (before events were
    matched by receipt): the balance counts its money as given back, so reconcile says so."""
    order = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), order, 699)
    Charge.objects.update(processor_status="failed", failure_reason="expired_or_canceled_card")
    receipt = Charge.objects.get().receipt

    status, said = reconcile()

    assert status == 1
    assert (
        f"Order {order.number}: the ledger says the refund {receipt} of $6.99 failed, the "
        "processor says succeeded" in said
    )
    assert "Problems: 1." in said


def test_amounts_that_differ_and_a_second_refund_under_one_key_are_problems(db):
    order = paid_order("pi_Differ")
    pay(payments.DemoGateway(), order, 699)
    charge = Charge.objects.get()
    key, receipt = charge.idempotency_key, charge.receipt or ""

    report = services.reconcile_payments(
        since=a_day_ago(),
        gateway=Says(
            [
                ProcessorRefund(id=receipt, amount_cents=700, status="succeeded", desk_key=key),
                ProcessorRefund(id="re_twice", amount_cents=699, status="succeeded", desk_key=key),
            ]
        ),
    )

    assert len(report.problems) == 3, report.problems
    assert (
        f"the refund {receipt} is $7.00 at the processor and $6.99 in the ledger"
        in (report.problems[0])
    )
    assert (
        "a second refund, re_twice of $6.99, under the key of the ledger's" in (report.problems[1])
    )
    assert "counted as made outside the desk" in report.problems[1]
    assert (
        "was refunded $13.99 at the processor ($7.00 by the desk, $6.99 outside the desk)"
        in report.problems[2]
    )


def test_an_order_charged_before_since_is_not_looked_at(db, stripe_here):
    order = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), order, 699)
    Charge.objects.update(created_at=datetime(2026, 1, 1, tzinfo=UTC))
    Ticket.objects.update(created_at=datetime(2026, 1, 1, tzinfo=UTC))

    status, said = reconcile("--since", "2026-02-01")

    assert status == 0
    assert "Reconciled 0 order(s) charged or ticketed since Feb 1, 2026, 00:00 UTC" in said


def test_an_order_the_desk_did_not_charge_is_looked_at_when_a_ticket_was_opened_for_it(
    db, stripe_here
):
    """The balance check refused the desk's refund (nothing charged, no ledger row), yet the
    order's refund made in Stripe's dashboard is recorded and counted."""
    order = paid_order(stripe_here.payment_intent(PAID), paid=PAID)
    Ticket.objects.create(thread_id=f"refund-{order.number}", order=order)
    stripe_here.refund_outside(order.payment_reference, 5000)
    assert not Charge.objects.exists()

    status, said = reconcile()

    assert status == 0, said
    assert "Reconciled 1 order(s)" in said
    assert "Refunds made outside the desk: 1 ($50.00), 1 new" in said
    assert OutsideRefund.objects.get().order == order


def test_a_since_that_is_not_a_date_is_refused(db):
    status, said = reconcile("--since", "yesterday")

    assert status == 1
    assert "--since 'yesterday' is not a date (YYYY-MM-DD)." in said


def test_a_since_in_the_future_is_refused_and_nothing_is_saved(db, stripe_here):
    tomorrow = (timezone.now() + timedelta(days=1)).date()

    status, said = reconcile("--since", tomorrow.isoformat())

    assert status == 1
    assert said == f"--since {tomorrow} is in the future (UTC): nothing to check."
    assert not ReconcileRun.objects.exists()


def test_a_processor_that_cannot_be_read_is_a_problem(db, stripe_here):
    order = paid_order("pi_NoSuchPaymentAtStripe")
    Charge.objects.create(
        ticket=Ticket.objects.create(thread_id=f"refund-{order.number}", order=order),
        order=order,
        idempotency_key="k",
        amount_cents=1,
        status="refused",
    )

    status, said = reconcile()

    assert status == 1
    assert f"Order {order.number}: its refunds could not be read at the processor" in said


def test_orders_past_the_time_budget_are_left_for_the_next_run(db):
    order = paid_order("pi_Late")
    pay(payments.DemoGateway(), order, 699)

    report = services.reconcile_payments(
        since=a_day_ago(), gateway=Says([]), deadline=time.monotonic() - 1
    )

    assert (report.orders, report.not_checked) == (0, 1)
    assert "Not checked this time (out of time): 1 order(s)." in report.lines()


def test_beat_runs_it_daily_on_the_housekeeping_queue(db, stripe_here):
    entry = django_settings.CELERY_BEAT_SCHEDULE["reconcile-with-the-processor"]
    assert entry["task"] == "refunds.tasks.reconcile_payments"
    assert entry["schedule"] == 24 * 3600
    assert django_settings.CELERY_TASK_ROUTES[entry["task"]] == {"queue": "housekeeping"}
    order = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), order, 699)
    stripe_here.refund_outside(order.payment_reference, 1)

    assert tasks.reconcile_payments() == 1  # the problem found: past the fee


# --- each run's report: kept, shown under ops, emailed to the admins on a problem ---------------
def a_run(*, problem: bool = False, dispute: bool = False) -> services.ReconcileReport:
    """One run over the desk's refund of one paid order: with a problem (the processor holds
    another amount) or none, with an open dispute or none."""
    if not Charge.objects.exists():
        pay(payments.DemoGateway(), paid_order("pi_Run"), 699)
    charge = Charge.objects.get()
    held = ProcessorRefund(
        id=charge.receipt or "",
        amount_cents=698 if problem else 699,
        status="succeeded",
        desk_key=charge.idempotency_key,
    )
    disputes = [ProcessorDispute(id="dp_Open", status="needs_response", amount_cents=PAID)]
    return services.reconcile_payments(
        since=a_day_ago(), gateway=Says([held], disputes if dispute else [])
    )


def test_a_run_saves_its_report(db):
    report = a_run(problem=True, dispute=True)

    run = ReconcileRun.objects.get()
    assert run.lines == report.lines(since=False)  # its page says since when, in one zone
    assert (run.orders, run.problems, run.open_disputes) == (
        1,
        report.problems,
        report.open_disputes,
    )
    assert len(run.problems) == len(run.open_disputes) == 1
    assert run.by == "command"
    assert run.since < run.started_at <= run.finished_at


def test_the_command_and_beat_say_which_ran(db, stripe_here):
    order = paid_order(stripe_here.payment_intent(PAID))
    pay(StripeGateway(), order, 699)

    reconcile()
    tasks.reconcile_payments()

    assert list(ReconcileRun.objects.values_list("by", flat=True)) == ["beat", "command"]


def test_the_page_shows_the_last_report_to_an_admin(client, admin_user):
    a_run()
    a_run(problem=True, dispute=True)
    last = ReconcileRun.objects.first()
    assert last is not None
    [problem], [dispute] = last.problems, last.open_disputes
    client.force_login(admin_user)

    page = client.get(reverse("ops:reconcile")).content.decode()

    assert "1 problem</strong>, 1 open dispute." in page
    assert f'<li class="reconcile-problem">- {escape(problem)}</li>' in page
    assert f'<li class="reconcile-dispute">- {escape(dispute)}</li>' in page
    assert "<li>Problems: 1.</li>" in page
    earlier = ReconcileRun.objects.last()
    assert earlier is not None and earlier != last
    assert f'id="reconcile-run-{earlier.pk}"' in page  # listed with its counts
    assert f'id="reconcile-run-{last.pk}"' not in page
    assert 'id="nav-reconcile"' in page


@pytest.mark.parametrize("who", ["agent", "manager"])
def test_the_page_is_refused_to_everyone_but_admins(client, db, who, request):
    a_run(problem=True)
    client.force_login(request.getfixturevalue(who))

    response = client.get(reverse("ops:reconcile"))

    assert response.status_code == 403
    assert "in the ledger" not in response.content.decode()


def test_the_page_says_when_no_reconcile_has_run(client, admin_user):
    client.force_login(admin_user)

    page = client.get(reverse("ops:reconcile")).content.decode()

    assert (
        "No reconcile has run yet: it runs daily, or run <code>manage.py reconcile</code>." in page
    )


@pytest.fixture
def admins(settings) -> None:
    settings.ADMINS = [("Ops", "ops@example.com"), ("", "cfo@example.com")]


def test_a_run_with_a_problem_emails_the_admins_once(db, admins):
    report = a_run(problem=True)

    [sent] = mail.outbox
    assert sent.to == ["ops@example.com", "cfo@example.com"]
    assert sent.subject == (
        "[Refund Desk] Reconcile found 1 problem between the ledger and the processor"
    )
    assert "\n".join(report.lines()) in sent.body
    assert "/ops/reconcile/" in sent.body


def test_a_clean_run_emails_no_one(db, admins):
    a_run(dispute=True)  # an open dispute is no problem of the ledger's

    assert mail.outbox == []


def test_with_no_admins_set_a_problem_emails_no_one(db, settings):
    settings.ADMINS = []

    a_run(problem=True)

    assert mail.outbox == []


class Refuses(BaseEmailBackend):
    def send_messages(self, email_messages):
        raise ConnectionRefusedError("the mail server is down")


def test_a_mail_server_that_fails_does_not_fail_the_run(db, admins, settings, caplog):
    settings.EMAIL_BACKEND = "tests.test_reconcile.Refuses"

    report = a_run(problem=True)

    assert not report.ok
    assert ReconcileRun.objects.get().problems == report.problems
    assert "the admins' email about 1 problem was not sent" in caplog.text


# --- against the demo gateway: nothing to reconcile; a run through the wrong gateway ------------
def test_against_the_demo_gateway_there_is_nothing_to_reconcile_and_no_report(db):
    """The demo's records are the desk's own refunds: nothing made elsewhere to compare."""
    order = paid_order("pi_Demo")
    pay(payments.DemoGateway(), order, 699)

    status, said = reconcile()

    assert status == 0, said
    assert said.strip() == (
        "Nothing to reconcile: REFUNDS_GATEWAY is the demo gateway, which moves no money and "
        "holds only the desk's own refunds. No report was saved."
    )
    assert not ReconcileRun.objects.exists()


def test_a_run_through_the_wrong_gateway_says_so_and_saves_no_report(
    db, stripe_here, admins, settings
):
    """The web refunds through Stripe; the command is run without its variables (the demo
    gateway): the ledger's refunds are not reported missing at the processor, nor saved."""
    order = paid_order(stripe_here.payment_intent(PAID))
    receipt = pay(StripeGateway(), order, 699)
    settings.REFUNDS_GATEWAY = "refunds.payments.DemoGateway"  # the command run without them
    payments.get_gateway.cache_clear()

    status, said = reconcile()

    assert status == 1
    assert f"the ledger holds 1 refund(s) the demo gateway never made (receipt {receipt})" in said
    assert "Run it with the same payment variables as the web" in said
    assert "is not at the processor" not in said
    assert not ReconcileRun.objects.exists()
    assert mail.outbox == []


def test_the_saved_report_leaves_its_moment_to_the_page_which_says_it_in_one_zone(
    client, admin_user
):
    a_run()
    client.force_login(admin_user)
    client.cookies["tz"] = "Asia/Tokyo"

    page = client.get(reverse("ops:reconcile")).content.decode()

    [run] = ReconcileRun.objects.all()
    assert run.lines[0] == "Reconciled 1 order(s): 1 refund(s) at the processor."
    assert " JST" in page and " UTC" not in page
