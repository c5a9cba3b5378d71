"""`manage.py reconcile` and its daily task: the ledger beside the processor. It moves no money;
it catches what the pre-charge check cannot (a dashboard refund between its lookup and ours)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from django.core.mail import mail_admins
from django.db.models import Q
from django.utils import timezone

from core.clock import day_words, local_words
from core.network import outside_transaction
from refunds import metrics, money
from refunds.flow.errors import DISPUTED, GatewayError
from refunds.flow.words import dollars
from refunds.models import Charge, Order, ReconcileRun
from refunds.payments import Gateway, ProcessorDispute, ProcessorRefund, get_gateway
from refunds.payments.demo import DemoGateway, DemoProcessorRefund
from refunds.payments.stripe import StripeGateway
from refunds.services.stripe_events import refund_record
from refunds.statuses import PROCESSOR_GAVE_BACK

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    """What one reconcile found: counts, and each thing that is wrong in words."""

    since: datetime
    orders: int = 0  # orders whose payment was listed at the processor
    listed: int = 0  # refunds listed there
    outside: int = 0  # of them, made outside the desk
    outside_cents: int = 0
    outside_new: int = 0  # recorded by this run (the others were known already)
    statuses_moved: int = 0  # desk refunds whose status the processor moved on
    under_way: int = 0  # ledger rows whose outcome is not known yet, found at the processor
    not_checked: int = 0  # orders left for the next run (the time budget ran out)
    problems: list[str] = field(default_factory=list)
    open_disputes: list[str] = field(default_factory=list)  # what a manager reads before refunding
    not_run: str = ""  # why nothing was compared (the demo gateway); no report is saved
    wrong_gateway: bool = False  # the ledger's refunds went through another gateway

    @property
    def ok(self) -> bool:
        return not self.problems and not self.wrong_gateway

    def lines(self, *, since: bool = True) -> list[str]:
        """The report in words; `since` False for the saved one (its page says it in local time)."""
        if self.not_run:
            return [self.not_run]
        looked = f"Reconciled {self.orders} order(s)"
        if since:
            looked += f" charged or ticketed since {local_words(self.since)}"
        said = [
            f"{looked}: {self.listed} refund(s) at the processor.",
            f"Refunds made outside the desk: {self.outside} ({dollars(self.outside_cents)}), "
            f"{self.outside_new} new since the last look.",
            f"Desk refunds whose status the processor moved on: {self.statuses_moved}.",
        ]
        if self.under_way:
            said.append(
                f"Desk refunds under way in the ledger and made at the processor: "
                f"{self.under_way} (their ticket's next run settles them)."
            )
        if self.open_disputes:
            said.append(f"Open disputes: {len(self.open_disputes)}.")
            said += [f"- {words}" for words in self.open_disputes]
        if self.not_checked:
            said.append(f"Not checked this time (out of time): {self.not_checked} order(s).")
        said.append(f"Problems: {len(self.problems)}.")
        return said + [f"- {problem}" for problem in self.problems]


def reconcile_payments(
    *,
    since: datetime,
    gateway: Gateway | None = None,
    deadline: float | None = None,
    by: str = ReconcileRun.By.COMMAND,
) -> ReconcileReport:
    """Compare the ledger with the processor for the orders charged since `since`."""
    outside_transaction("the payment processor")
    started_at = timezone.now()
    gateway = gateway or get_gateway()
    report = ReconcileReport(since=since)
    # Ticketed orders too: one whose ticket charged nothing may be refunded elsewhere.
    touched = Q(charges__created_at__gte=since) | Q(links__ticket__created_at__gte=since)
    orders = Order.objects.filter(touched).exclude(payment_reference="").distinct().order_by("pk")
    if isinstance(gateway, DemoGateway):
        return _against_the_demo(report, orders)
    for order in orders:
        if deadline is not None and time.monotonic() > deadline:
            report.not_checked += 1
            continue
        try:
            listed = gateway.payment_refunds(order.payment_reference)
        except GatewayError as exc:
            report.problems.append(
                f"Order {order.number}: its refunds could not be read at the processor ({exc})."
            )
            continue
        report.orders += 1
        report.listed += len(listed)
        report.outside_new += money.outside_refunds_record(order.pk, listed)
        _compare(order, listed, report)
        try:
            disputes = gateway.payment_disputes(order.payment_reference)
        except GatewayError as exc:
            report.problems.append(
                f"Order {order.number}: its disputes could not be read at the processor ({exc})."
            )
            continue
        money.disputes_record(order.pk, disputes)
        report.open_disputes += [_dispute_words(order, d) for d in disputes if d.open]
    metrics.RECONCILE_PROBLEMS.inc(len(report.problems))
    lines = report.lines()
    for line in lines:
        (log.warning if report.problems else log.info)("reconcile: %s", line)
    ReconcileRun.objects.create(
        by=by,
        started_at=started_at,
        finished_at=timezone.now(),
        since=since,
        orders=report.orders,
        lines=report.lines(since=False),
        problems=report.problems,
        open_disputes=report.open_disputes,
    )
    _tell_the_admins(report.problems, lines)
    return report


def _against_the_demo(report: ReconcileReport, orders) -> ReconcileReport:
    """Refunds the demo gateway never made went through another one: said, not called missing."""
    made = Charge.objects.filter(
        order__in=orders, status=Charge.Status.SUCCEEDED, receipt__isnull=False
    )
    elsewhere = made.exclude(
        idempotency_key__in=DemoProcessorRefund.objects.values("idempotency_key")
    )
    receipts = list(elsewhere.order_by("pk").values_list("receipt", flat=True)[:3])
    if not receipts:
        report.not_run = (
            "Nothing to reconcile: REFUNDS_GATEWAY is the demo gateway, which moves no money and "
            "holds only the desk's own refunds. No report was saved."
        )
        log.info("reconcile: %s", report.not_run)
        return report
    report.wrong_gateway = True
    count = elsewhere.count()
    named = ", ".join(receipts) + (", …" if count > len(receipts) else "")
    report.not_run = (
        f"Not reconciled: the ledger holds {count} refund(s) the demo gateway never made "
        f"(receipt{'s' if count > 1 else ''} {named}), so they "
        "went through another gateway. Run it with the same payment variables as the web "
        "(REFUNDS_GATEWAY, STRIPE_SECRET_KEY, STRIPE_API_BASE where it is set). No report was "
        "saved."
    )
    log.error("reconcile: %s", report.not_run)
    return report


def _tell_the_admins(problems: list[str], lines: list[str]) -> None:
    """One email to settings.ADMINS on a problem; a failing mail server loses only the email."""
    if not problems:
        return
    found = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
    try:
        mail_admins(
            f"Reconcile found {found} between the ledger and the processor",
            "\n".join([*lines, "", "On the desk: /ops/reconcile/ (admins only)."]),
        )
    except Exception:
        log.exception("reconcile: the admins' email about %s was not sent", found)


def _dispute_words(order: Order, dispute: ProcessorDispute) -> str:
    when = dispute.opened_at
    opened = f", opened {day_words(timezone.localdate(when))}" if when else ""
    return (
        f"Order {order.number}: dispute {dispute.id} of {dollars(dispute.amount_cents)} "
        f"({dispute.status}){opened}. {DISPUTED}"
    )


def _compare(order: Order, listed: list[ProcessorRefund], report: ReconcileReport) -> None:
    charges = list(Charge.objects.filter(order=order).order_by("pk"))
    by_receipt = {c.receipt: c for c in charges if c.receipt}
    by_key = {c.idempotency_key: c for c in charges}
    desk_cents = outside_cents = 0
    for refund in listed:
        counts = refund.status not in PROCESSOR_GAVE_BACK
        # The rule of Charge.objects.of_refund: a row with a receipt is that refund only.
        keyed = by_key.get(refund.desk_key)
        charge = by_receipt.get(refund.id) or (keyed if keyed and not keyed.receipt else None)
        if charge is None:
            report.outside += 1
            report.outside_cents += refund.amount_cents
            outside_cents += refund.amount_cents if counts else 0
            if keyed:
                report.problems.append(
                    f"Order {order.number}: the processor has a second refund, {refund.id} of "
                    f"{dollars(refund.amount_cents)}, under the key of the ledger's "
                    f"{keyed.receipt} ({keyed.idempotency_key}); counted as made outside the "
                    "desk."
                )
            elif refund.desk_key:
                report.problems.append(
                    f"Order {order.number}: refund {refund.id} of {dollars(refund.amount_cents)} "
                    f"carries the desk's key {refund.desk_key}, which the ledger does not have "
                    "(counted as made outside the desk)."
                )
            continue
        desk_cents += refund.amount_cents if counts else 0
        _compare_one(order, charge, refund, report)
    for charge in charges:
        made = charge.status == Charge.Status.SUCCEEDED and charge.receipt
        if made and charge.receipt not in {refund.id for refund in listed}:
            report.problems.append(
                f"Order {order.number}: the ledger's refund {charge.receipt} of "
                f"{dollars(charge.amount_cents)} (ticket {charge.ticket_id}) is not at the "
                "processor."
            )
    _past_what_was_paid(order, desk_cents, outside_cents, report)


def _compare_one(
    order: Order, charge: Charge, refund: ProcessorRefund, report: ReconcileReport
) -> None:
    """One of the desk's refunds, the ledger's row beside what the processor holds."""
    if charge.status == Charge.Status.REFUSED:
        report.problems.append(
            f"Order {order.number}: the ledger says the refund {charge.idempotency_key} was "
            f"refused, but the processor holds it as {refund.id} of "
            f"{dollars(refund.amount_cents)} ({refund.status or 'status not said'})."
        )
        return
    if charge.amount_cents != refund.amount_cents:
        report.problems.append(
            f"Order {order.number}: the refund {refund.id} is {dollars(refund.amount_cents)} at "
            f"the processor and {dollars(charge.amount_cents)} in the ledger."
        )
    if charge.status == Charge.Status.PENDING:
        report.under_way += 1
        return
    before = charge.processor_status
    refund_record(
        {
            "id": refund.id,
            "metadata": {StripeGateway.METADATA_KEY: refund.desk_key} if refund.desk_key else {},
            "status": refund.status,
            "failure_reason": refund.failure_reason,
        },
        event="reconcile",
    )
    charge.refresh_from_db(fields=["processor_status"])
    report.statuses_moved += charge.processor_status != before
    gave_back = charge.processor_status in PROCESSOR_GAVE_BACK
    if gave_back and refund.status and refund.status not in PROCESSOR_GAVE_BACK:
        # Statuses only move forward, so the ledger keeps its word; the balance counts this
        # refund's money as given back, and a second approval would refund the order again.
        report.problems.append(
            f"Order {order.number}: the ledger says the refund {refund.id} of "
            f"{dollars(refund.amount_cents)} {charge.processor_status}, the processor says "
            f"{refund.status}: the desk counts its money as given back and may refund the order "
            "again."
        )


def _past_what_was_paid(
    order: Order, desk_cents: int, outside_cents: int, report: ReconcileReport
) -> None:
    """The processor's standing refunds of the order beside what was paid (or may be refunded)."""
    if order.paid_cents is not None:
        limit, of = order.paid_cents, f"the {dollars(order.paid_cents)} the customer paid"
    else:
        limit = order.shipping_fee_cents + sum(line.amount_cents for line in order.lines.all())
        of = f"the {dollars(limit)} the desk may refund of it (the shop sent no amount paid)"
    total = desk_cents + outside_cents
    if total > limit:
        report.problems.append(
            f"Order {order.number} was refunded {dollars(total)} at the processor "
            f"({dollars(desk_cents)} by the desk, {dollars(outside_cents)} outside the desk), "
            f"{dollars(total - limit)} past {of}."
        )
