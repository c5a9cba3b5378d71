from __future__ import annotations

import math
import re
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Exists, F, Max, OuterRef, Q, Sum, Value
from django.db.models.functions import Now, Upper
from django.utils import timezone

from core.clock import day_words, local_words
from refunds import policy
from refunds.flow.words import dollars
from refunds.payments.records import DISPUTE_OPEN
from refunds.statuses import (
    CHARGE_HOLDS_BALANCE,
    PROCESSOR_GAVE_BACK,
    PROCESSOR_ON_ITS_WAY,
    TICKET_LEASABLE,
    TICKET_WORK_LEFT,
    ChargeStatus,
    DecisionAnswer,
    EmailDelivery,
    EmailStatus,
    ProcessorStatus,
    TicketStatus,
    processor_behind,
)


class Role(models.TextChoices):
    AGENT = "agent", "Support agent"
    MANAGER = "manager", "Manager"


ROLE_GROUPS = {Role.AGENT: "Support agents", Role.MANAGER: "Managers"}
ADMIN_GROUP = "Admins"


ORDER_NUMBER_MAX = 32
_NOT_IN_A_NUMBER = r"\s\u0000-\u001f\u007f-\u009f"
# What an order number is, in one pattern that the code reads with and the API's schema states:
# spaces around it and "#" before it ("#1042") are how people write it, not part of it; inside,
# no space and no control character (PostgreSQL refuses a NUL in any text: a 500).
ORDER_NUMBER_PATTERN = (
    rf"^\s*#*\s*([^{_NOT_IN_A_NUMBER}#][^{_NOT_IN_A_NUMBER}]{{0,{ORDER_NUMBER_MAX - 1}}})\s*$"
)
_ORDER_NUMBER = re.compile(ORDER_NUMBER_PATTERN)


def order_number_read(raw: object) -> str:
    """What an order number is, for every way one comes in (the API, the desk's forms, sorting,
    the reader, the shop's orders): ORDER_NUMBER_PATTERN. A whole number is read as its digits
    (helpdesks send either). ValueError says why it is not one."""
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise ValueError("An order number is text, such as 1042.")
    text = str(raw)
    found = _ORDER_NUMBER.fullmatch(text)
    if found:
        return found[1]
    number = text.strip().lstrip("#").strip()
    if not number:
        raise ValueError("Enter an order number.")
    if len(number) > ORDER_NUMBER_MAX and not re.search(f"[{_NOT_IN_A_NUMBER}]", number):
        raise ValueError(
            f"{number[:40]}… is too long for an order number "
            f"(at most {ORDER_NUMBER_MAX} characters)."
        )
    raise ValueError(
        f"{number[:40]!r} is not an order number (no spaces, no control characters such as NUL)."
    )


def same_customer(email: str, other: str) -> bool:
    """ "The same customer" is the same email address whatever its case; of_customer() is the
    same rule in SQL."""
    return email.strip().upper() == other.strip().upper()


def of_customer(queryset, email: str, *, field: str = "customer_email"):
    """The rows of `queryset` whose `field` is `email` whatever its case (same_customer), found
    through the UPPER(customer_email) index (Django's iexact is a LIKE on SQLite, which cannot
    use it)."""
    return queryset.alias(customer_upper=Upper(field)).filter(
        customer_upper=Upper(Value(email.strip()))
    )


class Order(models.Model):
    """An order of the shop's: what lookup reads. Amounts are in the currency's minor unit."""

    number = models.CharField(max_length=ORDER_NUMBER_MAX, unique=True)
    customer_name = models.CharField(max_length=200)
    customer_email = models.EmailField()
    promised_on = models.DateField()
    delivered_on = models.DateField()
    shipping_fee_cents = models.PositiveIntegerField()
    currency = models.CharField(max_length=3, default="USD")  # ISO 4217, upper case
    # What the payment processor knows the order's payment by (Stripe: a PaymentIntent "pi_..."
    # or a Charge "ch_..."); a refund is made against it.
    payment_reference = models.CharField(max_length=255, blank=True)
    # What the order came to (its lines, their tax and the shipping fee) and what the processor
    # captured of it. Both null, or both set: null means the shop has not sent the order's lines
    # (an order from before lines, or sent in the form without them); such an order has no
    # lines, and only its shipping fee is refundable, as before lines.
    total_cents = models.PositiveIntegerField(null=True, blank=True)
    paid_cents = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(total_cents__isnull=True, paid_cents__isnull=True)
                | Q(total_cents__isnull=False, paid_cents__isnull=False),
                name="order_total_and_paid_together",
            ),
            models.CheckConstraint(
                condition=Q(total_cents__isnull=True) | Q(paid_cents__lte=F("total_cents")),
                name="order_paid_within_total",
            ),
        ]
        indexes = [
            # Case-insensitive lookups (a customer's other tickets, the tickets page's search)
            # use these instead of reading every order.
            models.Index(Upper("customer_email"), name="order_email_upper_idx"),
            models.Index(Upper("number"), name="order_number_upper_idx"),
        ]
        # Granted to the shop's integration user (the group "Shop integrations"), not to the
        # desk: POST /api/orders/ needs it.
        permissions = [("push_orders", "Can push orders through the API")]

    def __str__(self) -> str:
        return f"Order {self.number}"

    def refunded_cents(self) -> int:
        """What the ledger holds against this order: refunds paid, and charges under way."""
        charges = Charge.objects.filter(order=self).holding_balance()
        return charges.aggregate(total=Sum("amount_cents"))["total"] or 0

    def facts(self, *, for_ticket: int | None = None, but_key: str = "") -> dict:
        """What lookup reads and the ledger checks (refunds/money.py, with the order locked):
        the order, and what the ledger holds of it (paid or under way) in all, per line and of
        its fee, from tickets other than `for_ticket` and charges other than `but_key`; and what
        of its payment was refunded outside the desk."""
        held = Charge.objects.filter(order=self).holding_balance()
        if for_ticket is not None:
            held = held.exclude(ticket_id=for_ticket)
        if but_key:
            held = held.exclude(idempotency_key=but_key)
        total = held.aggregate(cents=Sum("amount_cents"), last=Max("ticket_id"))
        per_line = held.held_per_line()
        outside = self.outside_refunds.holding_balance().aggregate(cents=Sum("amount_cents"))
        facts = {
            "number": self.number,
            "customer_name": self.customer_name,
            "customer_email": self.customer_email,
            "promised_on": self.promised_on.isoformat(),
            "delivered_on": self.delivered_on.isoformat(),
            "fee_cents": self.shipping_fee_cents,
            "refunded_cents": total["cents"] or 0,
            "refunded_by_ticket": total["last"],
            "lines": [
                {
                    "id": line.pk,
                    "title": line.title,
                    "sku": line.sku,
                    "unit_price_cents": line.unit_price_cents,
                    "quantity": line.quantity,
                    "tax_cents": line.tax_cents,
                    "refunded_quantity": per_line.get(line.pk, (0, 0))[0],
                    "refunded_cents": per_line.get(line.pk, (0, 0))[1],
                }
                for line in self.lines.order_by("id")
            ],
            "shipping_refunded_cents": per_line.get(0, (0, 0))[1],
        }
        if outside["cents"]:  # refunded at the processor, not by the desk: less is left of it
            facts["outside_refunded_cents"] = outside["cents"]
        return facts | ({"paid_cents": self.paid_cents} if self.paid_cents is not None else {})


class OrderLine(models.Model):
    """One line of an order as the shop sent it: what was bought, at what unit price, how many.
    Amounts are in the order's currency's minor unit; `tax_cents` is the line's tax as the shop
    states it (0 when it sends none). Written by refunds/services/orders.py (import, push), the
    order source and the demo's data, each read by one typed input (refunds.order_in.OrderIn)."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    line_id = models.CharField(max_length=64)  # the shop's id for the line
    sku = models.CharField(max_length=64, blank=True)
    title = models.CharField(max_length=200)
    unit_price_cents = models.PositiveIntegerField()
    quantity = models.PositiveIntegerField()
    tax_cents = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["order", "line_id"], name="order_line_id_unique"),
            models.CheckConstraint(condition=Q(quantity__gte=1), name="order_line_quantity_min"),
        ]
        ordering = ["order", "id"]

    def __str__(self) -> str:
        return f"{self.quantity} × {self.title}"

    @property
    def amount_cents(self) -> int:
        """What the line came to: its units and its tax."""
        return self.unit_price_cents * self.quantity + self.tax_cents


class TicketQuerySet(models.QuerySet):
    def awaiting(self) -> TicketQuerySet:
        """Tickets paused on an interrupt that a person must answer."""
        return self.filter(status=Ticket.Status.AWAITING_REVIEW)

    def waiting_on_customers(self) -> TicketQuerySet:
        """Tickets whose review asked the customer and waits on their reply."""
        return self.filter(status=Ticket.Status.AWAITING_CUSTOMER)

    def escalated(self) -> TicketQuerySet:
        """Reviews an agent (or the escalation timer) sent up to managers: escalated for the
        interrupt that is pending now, so a later review of the same ticket starts afresh."""
        return self.exclude(escalated_for="").filter(escalated_for=F("pending_interrupt_id"))

    def for_managers(self) -> TicketQuerySet:
        """Awaiting reviews a manager owns: over the agent limit, flagged, or escalated."""
        return self.awaiting().filter(
            Q(required_role=Role.MANAGER)
            | (~Q(escalated_for="") & Q(escalated_for=F("pending_interrupt_id")))
        )

    def for_agents(self) -> TicketQuerySet:
        """Awaiting reviews support agents own: within the agent limit, not escalated."""
        return (
            self.awaiting()
            .filter(required_role=Role.AGENT)
            .exclude(~Q(escalated_for="") & Q(escalated_for=F("pending_interrupt_id")))
        )

    def open(self) -> TicketQuerySet:
        """Tickets not yet in a final state (a failed one waits for an admin: still open)."""
        return self.exclude(status__in=Ticket.FINAL)

    def leasable(self) -> TicketQuerySet:
        """Tickets no worker holds: never leased, or the lease ran out (on the database clock)."""
        return self.filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now()))

    def answer_waiting(self, settled_before=None) -> TicketQuerySet:
        """Tickets with a recorded decision (past its grace) or fork not yet applied; with
        `settled_before`, only answers recorded before then."""
        return self.filter(_answer_waiting(settled_before))

    def fork_waiting(self) -> TicketQuerySet:
        """Tickets with an admin's fork recorded and not yet applied."""
        return self.filter(Exists(Fork.objects.unapplied().filter(ticket=OuterRef("pk"))))

    def refund_failed_waiting(self) -> TicketQuerySet:
        """Tickets with a refund the processor failed that has not gone back to a manager yet:
        the thread owes it a run, even though the ticket reads refunded."""
        return self.filter(_refund_failed_waiting())

    def grantable(self) -> TicketQuerySet:
        """Tickets whose lease a worker may take now (refunds/lease.py's grant): nobody holds
        it, and the ticket is neither finished nor failed, or a failed refund waits."""
        not_leasable = [status for status, yes in TICKET_LEASABLE.items() if not yes]
        return self.leasable().filter(~Q(status__in=not_leasable) | _refund_failed_waiting())

    def needing_worker(self, settled_before=None) -> TicketQuerySet:
        """Tickets a worker should advance now: no live lease, and work left, or a recorded
        decision or fork not yet applied (unless the ticket failed: an admin retries it), or a
        refund the processor failed that has not gone back to a manager yet. The
        one answer, used by the sweep and crashtest. The sweep passes `settled_before` to leave
        fresh work to the task sent for it."""
        young = {} if settled_before is None else {"updated_at__lt": settled_before}
        work_left = [status for status, yes in TICKET_WORK_LEFT.items() if yes]
        return self.leasable().filter(
            Q(status__in=work_left, **young)
            | (~Q(status=Ticket.Status.FAILED) & _answer_waiting(settled_before))
            | _refund_failed_waiting()
        )


def _answer_waiting(settled_before=None) -> Q:
    decided = {} if settled_before is None else {"decided_at__lt": settled_before}
    forked = {} if settled_before is None else {"created_at__lt": settled_before}
    decision = Decision.objects.unapplied().due().filter(ticket=OuterRef("pk"), **decided)
    fork = Fork.objects.unapplied().filter(ticket=OuterRef("pk"), **forked)
    return Q(Exists(decision)) | Q(Exists(fork))


def _refund_failed_waiting() -> Q:
    return Q(Exists(Charge.objects.failed_not_handed_back().filter(ticket=OuterRef("pk"))))


class Ticket(models.Model):
    """Mirror of one LangGraph thread. The checkpointer is the truth; this row is what the
    queue, the API and the sweep read, rebuilt from the checkpoint after every run."""

    Status = TicketStatus

    FINAL = (Status.REFUNDED, Status.DECLINED, Status.REJECTED)
    OPEN = (
        Status.NEW,
        Status.RUNNING,
        Status.AWAITING_REVIEW,
        Status.AWAITING_CUSTOMER,
        # Closed for want of a reply, not finished: a reply reopens it, so it keeps its orders.
        Status.CLOSED,
        Status.FAILED,
    )

    thread_id = models.CharField(max_length=64, unique=True)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="tickets")
    note = models.TextField(blank=True)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    flow_version = models.PositiveSmallIntegerField(default=1)
    # Why the customer asks (refunds.policy.REASONS): the desk's form says it, or the intake's
    # reader read it from the customer's words; the policy routes by it.
    reason = models.CharField(
        max_length=20,
        choices=list(policy.REASONS.items()),
        default=policy.LATE_DELIVERY,
        db_default=policy.LATE_DELIVERY,
    )
    # What the intake's reader found in the message that opened it (intake.reading.Reading's
    # JSON), shown on the review card; None for a ticket a person opened by order number.
    reading = models.JSONField(null=True, blank=True)

    status = models.CharField(max_length=20, choices=Status, default=Status.NEW, db_index=True)
    next_nodes = models.JSONField(default=list, blank=True)
    nodes_run = models.JSONField(default=list, blank=True)
    outcome_reason = models.TextField(blank=True)
    pending_interrupt_id = models.CharField(max_length=64, blank=True, db_index=True)
    pending_payload = models.JSONField(null=True, blank=True)
    required_role = models.CharField(max_length=10, choices=Role, blank=True, db_index=True)
    amount_cents = models.PositiveIntegerField(null=True, blank=True)

    # One writer per thread: a lease taken with one conditional UPDATE (refunds/lease.py). The
    # epoch grows with every grant; each write a worker makes for the thread is conditional on it.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    # When the sweep last sent a wake-up that no worker has taken yet (a grant clears it): the
    # sweep does not pile a second message behind the first while the queue is backed up.
    woken_at = models.DateTimeField(null=True, blank=True)
    # The epoch whose run wrote the mirror as it released the lease: when the next grant's epoch
    # follows it, nobody crashed in between and the mirror is exact (runner.py trusts it).
    mirror_epoch = models.BigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    # The review desk. A claim is taken and released with one conditional UPDATE
    # (services.review_claim); it lapses at claim_expires_at, on the database clock.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    # The interrupt id an agent (or the timer) escalated to managers; it only counts while that
    # interrupt is pending, so a fork's new review starts at its own level again.
    escalated_for = models.CharField(max_length=64, blank=True)
    escalation_note = models.TextField(blank=True)
    # When the pending review appeared (written with the mirror, kept while the same interrupt
    # waits): the escalation timers and the queue's ages count from here.
    review_since = models.DateTimeField(null=True, blank=True)
    # The interrupt managers were last reminded of: one reminder per overdue review.
    reminded_for = models.CharField(max_length=64, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TicketQuerySet.as_manager()

    # Not a column: the desk's pages note here the decision recorded for the pending review and
    # not yet applied (reviews.views.common.with_pending_decisions).
    pending_decision: Decision | None
    # Set on the queue's rows: the one-line outcome of a review its reviewer just decided
    # (reviews.views.queue).
    decided_line: str
    # Its decided line's decision while the undo grace runs (Undo beside it), else None.
    undo_decision: Decision | None

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["status", "required_role", "-id"], name="ticket_queue_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="ticket_sweep_idx"),
            models.Index(fields=["opened_by", "-id"], name="ticket_recent_idx"),
            # The review queue's count, its page and its poll's version read only this index (on
            # SQLite a row's later columns sit behind its JSON, in overflow pages): oldest first,
            # with what decides whose queue a review is in and what its row shows. It starts as
            # the (status, review_since) index of the escalation timers did, and replaces it: a
            # narrower twin is what SQLite's planner picks once ANALYZE has run.
            models.Index(
                fields=[
                    "status",
                    "review_since",
                    "id",
                    "required_role",
                    "opened_by",
                    "escalated_for",
                    "pending_interrupt_id",
                    "claimed_by",
                    "claim_expires_at",
                ],
                name="ticket_queue_cover_idx",
            ),
            # The tickets page sorts by amount and filters by age at 100,000 tickets.
            models.Index(fields=["amount_cents", "id"], name="ticket_amount_idx"),
            models.Index(fields=["status", "amount_cents", "id"], name="ticket_status_amount_idx"),
            models.Index(fields=["created_at"], name="ticket_created_idx"),
        ]

    def __str__(self) -> str:
        return f"Ticket {self.pk} ({self.thread_id})"

    def save(self, *args, **kwargs) -> None:
        """A new ticket is linked to its first order in the same transaction (ticket_open links
        the others): the link's partial UNIQUE index is what refuses a second open ticket."""
        if self.pk is not None:
            return super().save(*args, **kwargs)
        with transaction.atomic():
            super().save(*args, **kwargs)
            TicketOrder.close_finished([self.order_id])
            TicketOrder.objects.create(
                ticket=self, order_id=self.order_id, position=0, open=self.status in self.OPEN
            )

    def order_numbers(self) -> list[str]:
        """The ticket's orders, first order first (the prefetched links when there are some)."""
        return [link.order.number for link in self.links.all()]

    @property
    def opener_words(self) -> str:
        """Who opened it, said one way on every page (the list, the ticket, its timeline): the
        user who opened it (or pasted or posted the message), "the intake" for a customer's
        message the mail provider handed in, "an integration" for a call with no user."""
        if self.opened_by is not None:
            return self.opened_by.username
        return "the intake" if self.reading is not None else "an integration"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL

    @property
    def is_escalated(self) -> bool:
        return bool(self.escalated_for) and self.escalated_for == self.pending_interrupt_id

    @property
    def review_role(self) -> str:
        """Who owns the pending review: its triage level, or managers once escalated."""
        return Role.MANAGER if self.is_escalated else self.required_role

    def claim_holder(self, now=None):
        """The user whose claim on this review is live, or None."""
        from django.utils import timezone

        if self.claimed_by_id is None or self.claim_expires_at is None:
            return None
        if self.claim_expires_at <= (now or timezone.now()):
            return None
        return self.claimed_by


def user_roles(user) -> set[str]:
    if not user.is_authenticated:
        return set()
    cached = getattr(user, "_refund_roles", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        user._refund_roles = cached
    return cached


class TicketOrder(models.Model):
    """One order a ticket covers (a ticket covers one or more orders of one customer; its first
    is also Ticket.order). `open` says the ticket may still refund the order: set when the link
    is made, cleared when a later ticket for the order finds this one finished (ticket_open),
    and the partial UNIQUE index on it keeps one open ticket per order, whoever races."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="links")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="links")
    position = models.PositiveSmallIntegerField(default=0)
    open = models.BooleanField(default=True)

    class Meta:
        ordering = ["ticket", "position"]
        constraints = [
            models.UniqueConstraint(fields=["ticket", "order"], name="ticket_order_once"),
            # One open ticket per order, kept by the database: a helpdesk retrying a POST, or two
            # tickets naming one order at once, cannot start a second refund of it.
            models.UniqueConstraint(
                fields=["order"], condition=Q(open=True), name="one_open_ticket_per_order"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.ticket} covers {self.order}"

    @classmethod
    def close_finished(cls, order_ids) -> None:
        """Close these orders' links whose ticket finished (a link is closed lazily, by whoever
        needs the order next: the partial UNIQUE index only counts open links)."""
        cls.objects.filter(order_id__in=order_ids, open=True).exclude(
            ticket__status__in=Ticket.OPEN
        ).update(open=False)


class UnappliedQuerySet(models.QuerySet):
    def unapplied(self) -> UnappliedQuerySet:
        """Recorded and neither applied nor refused: the thread still owes it a run."""
        return self.filter(applied_at=None, refused_reason="")

    def due(self) -> UnappliedQuerySet:
        """Past its undo grace (a fork has none): a worker may apply it now."""
        return self.filter(Q(apply_after__isnull=True) | Q(apply_after__lte=Now()))


class Decision(models.Model):
    """A reviewer's answer, stored before it is applied: a crash between the two is repaired by
    the sweep, and the UNIQUE interrupt id means one answer per question. A customer's reply
    to a reviewer's question (answer "reply") is recorded the same way, with no reviewer."""

    Answer = DecisionAnswer

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="decisions")
    interrupt_id = models.CharField(max_length=64, unique=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    answer = models.CharField(max_length=10, choices=Answer)
    reason = models.TextField(blank=True)  # for the customer: their email quotes it
    note = models.TextField(blank=True)  # internal: stays on the desk, never in the thread
    # approve or reject: the answer per open order number, in its one shape (approve with the
    # parts it refunds, reject with a reason: refunds/flow/answers.py); `answer` says whether
    # any was approved. None for an ask and the customer's reply.
    orders = models.JSONField(null=True, blank=True)
    # A rejection because the intake misread the message, which went back to Needs sorting: the
    # customer is told nothing now (no refusal that is not one); the message's next ticket
    # answers them.
    sent_back = models.BooleanField(default=False)
    decided_at = models.DateTimeField(auto_now_add=True)
    # The end of its undo grace (REFUNDS_UNDO_SECONDS): no worker applies it before, and Undo
    # withdraws it (deletes the row) only before. The runner sets it to None as it takes the
    # decision (the compare-and-set that Undo's also races: one wins). None: due now.
    apply_after = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    refused_reason = models.TextField(blank=True)

    objects = UnappliedQuerySet.as_manager()

    class Meta:
        ordering = ["decided_at"]
        indexes = [
            # The queue's lines for what its reviewer decided in the last seconds, read on every
            # poll: without it, every decision the reviewer ever made.
            models.Index(fields=["reviewer", "decided_at"], name="decision_reviewer_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_answer_display()} by {self.reviewer or 'the customer'} on {self.ticket}"

    def undo_seconds_left(self) -> int:
        """Whole seconds left of its undo grace (0 once it is over, or when it had none)."""
        if self.apply_after is None:
            return 0
        left = (self.apply_after - timezone.now()).total_seconds()
        return max(math.ceil(left), 0)

    def as_resume_value(self) -> dict:
        return resume_value(
            self.answer,
            self.reason,
            self.reviewer.username if self.reviewer else "",
            self.orders,
            sent_back=self.sent_back,
        )


def resume_value(
    answer: str,
    reason: str,
    reviewer: str,
    orders: dict | None = None,
    *,
    sent_back: bool = False,
) -> dict:
    """What a decision sends into the thread with `Command(resume=...)`. The internal note is
    left out on purpose: what enters the thread can reach the customer's email, the note must
    not."""
    value: dict[str, Any] = {"answer": answer, "reason": reason, "reviewer": reviewer}
    if orders:
        value["orders"] = orders  # the answer per open order
    if sent_back:
        value["sent_back"] = True  # a misread message sent back: nothing to tell the customer
    return value


class CannedReasonQuerySet(models.QuerySet):
    def rejecting(self) -> CannedReasonQuerySet:
        """The active replies a reviewer picks when they reject."""
        return self.filter(active=True, use=CannedReason.Use.REJECT).with_texts()

    def asking(self) -> CannedReasonQuerySet:
        """The active questions a reviewer picks when they ask the customer."""
        return self.filter(active=True, use=CannedReason.Use.ASK).with_texts()

    def setting_aside(self) -> CannedReasonQuerySet:
        """The active replies an agent picks when they set a message aside."""
        return self.filter(active=True, use=CannedReason.Use.SET_ASIDE).with_texts()

    def with_texts(self) -> CannedReasonQuerySet:
        """With their texts in other languages, which every offer of them reads."""
        return self.prefetch_related("texts")


class CannedReason(models.Model):
    """A reply for the customer that admins keep (Django admin): reviewers pick one when they
    reject, agents one when they set a message aside as not a refund request (`use`); either may
    add or write words of their own."""

    class Use(models.TextChoices):
        REJECT = "reject", "Rejecting a refund"
        SET_ASIDE = "set_aside", "Setting a message aside (not a refund request)"
        ASK = "ask", "Asking the customer (a question)"

    title = models.CharField(max_length=80, unique=True)
    text = models.TextField()
    active = models.BooleanField(default=True)
    position = models.PositiveSmallIntegerField(default=0)
    use = models.CharField(max_length=10, choices=Use, default=Use.REJECT)

    objects = CannedReasonQuerySet.as_manager()

    class Meta:
        ordering = ["position", "title"]

    def __str__(self) -> str:
        return self.title

    def text_in(self, language: str) -> str | None:
        """Its words in the customer's language (ISO 639-1; "" for a customer the desk has not
        read, who is written to in English): `text` is English, the others are its
        CannedReasonTexts. None when it has none in that language: it goes in English, and
        the desk tells the reviewer so before they pick it."""
        code = (language or "en").lower().split("-")[0]
        if code == "en":
            return self.text
        return next((t.text for t in self.texts.all() if t.language == code), None)


class CannedReasonText(models.Model):
    """A canned reply's words in one more language the desk writes to customers in
    (settings.LANGUAGES); its `text` on CannedReason is the English."""

    canned = models.ForeignKey(CannedReason, on_delete=models.CASCADE, related_name="texts")
    language = models.CharField(
        max_length=8, choices=[(c, n) for c, n in settings.LANGUAGES if c != "en"]
    )
    text = models.TextField()

    class Meta:
        ordering = ["language"]
        constraints = [
            models.UniqueConstraint(fields=["canned", "language"], name="canned_text_per_language")
        ]

    def __str__(self) -> str:
        return f"{self.canned} ({self.language})"


class CustomerQuestion(models.Model):
    """A reviewer's question to the customer (a Decision answered "ask"), and the token that
    the reply address carries for it (REFUNDS_REPLY_ADDRESS): unguessable, one per question.
    The thread waits on the customer until a reply from their address, matched by the token or
    by the question email's Message-ID, is recorded as the wait's Decision (`reply`)."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="questions")
    # Undoing the ask within its grace deletes the decision, and the question with it.
    decision = models.OneToOneField(Decision, on_delete=models.CASCADE, related_name="question")
    token = models.CharField(max_length=64, unique=True)
    text = models.TextField()
    asked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    asked_at = models.DateTimeField(auto_now_add=True)
    # The outbox key of the question's email, and its Message-ID (a reply's In-Reply-To).
    email_key = models.CharField(max_length=150, unique=True)
    message_id = models.CharField(max_length=200, db_index=True)
    # The reply that resumed the thread: its Decision, set once (a compare-and-set on NULL).
    reply = models.OneToOneField(
        Decision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    replied_at = models.DateTimeField(null=True, blank=True)
    # A reply that came before the thread waited on the question ({"text", "seen"}): the mail
    # server took the question before the run that sent it reached its wait. Kept once (a
    # compare-and-set on NULL); the recovery sweep applies it as the reply once the thread waits.
    early_reply = models.JSONField(null=True, blank=True)
    # The reminder the wait's timer sent (REFUNDS_ASK_REMIND_DAYS), once.
    reminded_at = models.DateTimeField(null=True, blank=True)
    # The reply that reopened the ticket closed for want of one (REFUNDS_ASK_DEFAULT_OUTCOME
    # "close"): set once, a compare-and-set on NULL, so a reply delivered twice reopens once.
    reopened_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["asked_at", "id"]

    def __str__(self) -> str:
        return f"Question {self.pk} on {self.ticket}"


class Fork(models.Model):
    """An admin's correction: the thread is forked from its checkpoint before triage with a
    corrected amount. The row is the audit entry; a worker applies it under the lease."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="forks")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    amount_cents = models.PositiveIntegerField()
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    from_checkpoint_id = models.CharField(max_length=64, blank=True)
    previous_amount_cents = models.PositiveIntegerField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    refused_reason = models.TextField(blank=True)

    objects = UnappliedQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"Fork of {self.ticket} by {self.by} to {dollars(self.amount_cents)}"


class ChargeQuerySet(models.QuerySet):
    def holding_balance(self) -> ChargeQuerySet:
        """Charges that count against an order's balance: paid, or under way (maybe paid); not a
        refund the processor failed or canceled after accepting it (its money came back)."""
        return self.filter(
            status__in=[s for s, holds in CHARGE_HOLDS_BALANCE.items() if holds]
        ).exclude(processor_status__in=PROCESSOR_GAVE_BACK)

    def failed_not_handed_back(self) -> ChargeQuerySet:
        """Refunds the processor failed after accepting them whose ticket has not yet gone back
        to a manager."""
        return self.failed_at_processor().filter(handed_back_at__isnull=True)

    def held_per_line(self) -> dict[int, tuple[int, int]]:
        """What these charges refund of each line (0: the shipping fee): units and cents."""
        rows = (
            ChargePart.objects.filter(charge__in=self)
            .values("line_id")
            .annotate(units=Sum("quantity"), cents=Sum("amount_cents"))
            .values_list("line_id", "units", "cents")
        )
        return {line or 0: (units, cents) for line, units, cents in rows}

    def money_moved(self) -> ChargeQuerySet:
        """Charges whose money moved, or may have (an outcome not yet known)."""
        return self.holding_balance()

    def on_its_way(self) -> ChargeQuerySet:
        """Refunds the processor accepted and has not finished: not at the customer's bank yet."""
        return self.filter(status=ChargeStatus.SUCCEEDED, processor_status__in=PROCESSOR_ON_ITS_WAY)

    def failed_at_processor(self) -> ChargeQuerySet:
        """Refunds the processor accepted and then failed or canceled."""
        return self.filter(status=ChargeStatus.SUCCEEDED, processor_status__in=PROCESSOR_GAVE_BACK)

    def of_refund(
        self, refund_id: str, key: str, *, orders: models.QuerySet[Order] | list[int]
    ) -> ChargeQuerySet:
        """The ledger's row of a processor refund: the one whose receipt is its id; before a row
        has its receipt, the one whose key the refund carries, of one of `orders` (those the
        refund's payment paid). Another refund carrying a row's key is not that row."""
        unreceipted = Q(receipt__isnull=True, idempotency_key=key, order__in=orders)
        return self.filter(Q(receipt=refund_id) | unreceipted if key else Q(receipt=refund_id))

    def record_processor_status(self, status: str, failure_reason: str = "") -> int:
        """Move these charges' processor status forward to `status` and answer how many moved:
        one compare-and-set UPDATE, so a status behind what a row holds (an older read, a late
        event, the create call's "pending" after an event said "succeeded") changes nothing.
        The one rule for what the gateway answered at settle time (refunds/money.py) and for
        Stripe's events (refunds/services/stripe_events.py). ValueError for a status the desk
        does not know; "" (not reported) records nothing."""
        status = ProcessorStatus(status)
        if status == ProcessorStatus.UNKNOWN:
            return 0
        reason = failure_reason if status in PROCESSOR_GAVE_BACK else ""
        return self.filter(processor_status__in=processor_behind(status)).update(
            processor_status=status, failure_reason=reason[:200]
        )


class Charge(models.Model):
    """The money ledger, kept around any gateway by refunds/money.py. A row is written (pending,
    with the writer's lease epoch) before the gateway is called and settled after; the UNIQUE key
    makes a repeated call find the first one, and an unknown outcome is settled by a lookup."""

    Status = ChargeStatus
    ProcessorStatus = ProcessorStatus

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="charges")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="charges")
    idempotency_key = models.CharField(max_length=150, unique=True)
    amount_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING)
    receipt = models.CharField(max_length=64, unique=True, null=True, blank=True)
    error = models.TextField(blank=True)
    epoch = models.BigIntegerField(
        default=0
    )  # the lease epoch of the run that last claimed the charge
    created_at = models.DateTimeField(auto_now_add=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    # What the processor says of the refund now (its events, re-read): "" not known, shown as
    # "Refunded" as before the desk listened; the ledger's `status` says whether it was accepted.
    # (A default in the database too: the ledger writes its rows in SQL, refunds/money.py.)
    processor_status = models.CharField(
        max_length=20,
        choices=ProcessorStatus,
        default=ProcessorStatus.UNKNOWN,
        db_default=ProcessorStatus.UNKNOWN,
        blank=True,
    )
    failure_reason = models.CharField(max_length=200, blank=True, default="", db_default="")
    # When a refund the processor failed sent its ticket back to a manager (refunds/runner.py).
    handed_back_at = models.DateTimeField(null=True, blank=True)

    objects = ChargeQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["order", "status"], name="charge_balance_idx")]

    def __str__(self) -> str:
        return f"{self.idempotency_key}: {dollars(self.amount_cents)} {self.status}"


class ChargePart(models.Model):
    """What one charge refunds, part by part: units of an order line, or the shipping fee (no
    line). Written with the charge's pending row, in the same transaction, by refunds/money.py,
    which checks them against what was bought and paid with the order locked."""

    charge = models.ForeignKey(Charge, on_delete=models.CASCADE, related_name="parts")
    line = models.ForeignKey(
        OrderLine, on_delete=models.PROTECT, null=True, blank=True, related_name="charge_parts"
    )  # None: the shipping fee
    quantity = models.PositiveIntegerField(default=0)  # units of the line; 0 for shipping
    amount_cents = models.PositiveIntegerField()
    restock = models.BooleanField(default=False, db_default=False)  # the item comes back

    def __str__(self) -> str:
        what = f"{self.quantity} of line {self.line_id}" if self.line_id else "shipping"
        return f"{what}: {dollars(self.amount_cents)}"


class OutsideRefundQuerySet(models.QuerySet):
    def holding_balance(self) -> OutsideRefundQuerySet:
        """Outside refunds that count against their order's balance: all but those the processor
        failed or canceled (their money came back)."""
        return self.exclude(status__in=PROCESSOR_GAVE_BACK)

    def record_status(self, status: ProcessorStatus, failure_reason: str = "") -> int:
        """Move these rows' status forward to `status` (one compare-and-set UPDATE, by the rule
        Charge's record_processor_status follows); answers how many moved."""
        reason = failure_reason if status in PROCESSOR_GAVE_BACK else ""
        return self.filter(status__in=processor_behind(status)).update(
            status=status, failure_reason=reason[:200]
        )


class OutsideRefund(models.Model):
    """A refund of an order's payment that the processor holds and the desk did not make (in
    Stripe's dashboard, the shop's admin, another tool): no ledger row has its key or its id.
    Recorded by the lookup before every charge and by `manage.py reconcile` (refunds/money.py,
    outside_refunds_record), once by the processor's id; it counts against the order's balance in
    the ledger's locked check unless the processor failed or canceled it."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="outside_refunds")
    processor_id = models.CharField(max_length=255, unique=True)  # Stripe's re_...
    amount_cents = models.PositiveIntegerField()
    # What the processor said last, moving forward only (statuses.PROCESSOR_RANK).
    status = models.CharField(max_length=20, choices=ProcessorStatus, blank=True)
    failure_reason = models.CharField(max_length=200, blank=True, default="")
    made_at = models.DateTimeField(null=True, blank=True)  # as the processor says
    recorded_at = models.DateTimeField(auto_now_add=True)

    objects = OutsideRefundQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.processor_id}: {dollars(self.amount_cents)} outside the desk"


class PaymentDisputeQuerySet(models.QuerySet):
    def still_open(self) -> PaymentDisputeQuerySet:
        """Disputes the processor said last were open (payments.records.DISPUTE_OPEN)."""
        return self.filter(status__in=DISPUTE_OPEN)


class PaymentDispute(models.Model):
    """A dispute of an order's payment (the customer asked their card's bank for the money), as
    the processor said last: recorded by the ledger's lookup before a charge and by Stripe's
    `charge.dispute.*` events (re-read), once by the processor's id. The charge itself never
    waits for an event: the lookup asks the processor each time (refunds/money.py)."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="disputes")
    processor_id = models.CharField(max_length=255, unique=True)  # Stripe's dp_...
    status = models.CharField(max_length=30)  # Stripe's word, as it said last
    amount_cents = models.PositiveIntegerField(default=0)
    reason = models.CharField(max_length=100, blank=True, default="")
    opened_at = models.DateTimeField(null=True, blank=True)  # as the processor says
    recorded_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = PaymentDisputeQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.processor_id}: {self.status}"

    @property
    def is_open(self) -> bool:
        return self.status in DISPUTE_OPEN

    def said(self) -> str:
        """The order's line for it: "Payment disputed on Dec 3" (and how it ended)."""
        when = f" on {day_words(self.opened_at.date())}" if self.opened_at else ""
        return f"Payment disputed{when}" + ("" if self.is_open else f" ({self.status})")


class Email(models.Model):
    """The outbox: one row per message key. A sender claims the row (status "sending", with its
    claim), marks it "handed over" before the final "." and "sent" after the server's answer,
    each in its own short transaction (refunds/mail.py). A takeover that finds a handover with no
    answer recorded moves it to "outcome unknown": the message may have been delivered."""

    Status = EmailStatus
    Delivery = EmailDelivery

    # None: mail about no ticket, such as the intake's acknowledgment of a message that opened
    # none (its sender is fenced by the message's lease instead: refunds/mail.py, send_once).
    ticket = models.ForeignKey(
        Ticket, null=True, blank=True, on_delete=models.CASCADE, related_name="emails"
    )
    key = models.CharField(max_length=150, unique=True)
    to = models.EmailField()
    subject = models.CharField(max_length=200)
    body = models.TextField()
    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING)
    claimed_by = models.CharField(max_length=100, blank=True)  # "epoch:<n>" or "resend:<id>"
    claimed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # The current claim's sender handed the final "." over at this moment (its answer not yet
    # recorded): "epoch:<n> on <host>:<pid>".
    handed_over_at = models.DateTimeField(null=True, blank=True)
    handed_over_by = models.CharField(max_length=200, blank=True)
    # The last handover whose answer was never recorded (its sender stopped, or the answer was
    # lost): when it was handed over and by whom. A second copy may exist from then.
    outcome_unknown_at = models.DateTimeField(null=True, blank=True)
    outcome_unknown_by = models.CharField(max_length=200, blank=True)
    # A provider's own id for the message (anymail's message_id), and what its tracking webhook
    # said last (refunds/mail_tracking.py): "bounced: mailbox unknown" shows on the undelivered
    # page.
    # (Defaults in the database too: the outbox's claim is a hand-written INSERT.)
    provider_message_id = models.CharField(
        max_length=255, blank=True, default="", db_default="", db_index=True
    )
    delivery = models.CharField(
        max_length=12, choices=Delivery, blank=True, default="", db_default=""
    )
    delivery_detail = models.CharField(max_length=500, blank=True, default="", db_default="")
    delivery_at = models.DateTimeField(null=True, blank=True)
    # The language it was written in (ISO 639-1; "" for mail from before), and the same email in
    # the desk's language for reviewers when that differs ("" when it was sent in it).
    language = models.CharField(max_length=8, blank=True, default="", db_default="")
    desk_text = models.TextField(blank=True, default="", db_default="")

    def __str__(self) -> str:
        return f"{self.subject} -> {self.to}"


class AuditEvent(models.Model):
    """One append-only record per action taken on a ticket, by a person or by the desk itself:
    who, when, what they saw, what they answered, and the checkpoint the thread reached after.
    Written through refunds.audit.record(); never edited or deleted."""

    class Action(models.TextChoices):
        OPEN = "open", "Opened"
        UNDO = "undo", "Undid a decision"  # within its grace; `answer` holds what was undone
        CLAIM = "claim", "Claimed"
        UNCLAIM = "unclaim", "Unclaimed"
        ESCALATE = "escalate", "Escalated"
        APPROVE = "approve", "Approved"
        REJECT = "reject", "Rejected"
        EDIT = "edit", "Edited the amount"
        FORK = "fork", "Forked"
        RETRY = "retry", "Retried"
        RESEND = "resend", "Resent an email"
        NOTE = "note", "Added a note"
        # A ticket of several orders answered order by order (some approved, some rejected,
        # some lowered): `answer["orders"]` holds each order's answer. Older rows logged this
        # as "approve", "reject" or "edit" with the same `answer["orders"]`.
        ANSWER = "answer", "Answered per order"
        REFUND_FAILED = "refund_failed", "Refund failed at the processor"
        ASK = "ask", "Asked the customer"
        # answer: {"resumed": bool, "message": id, "why": why a reply resumed nothing}
        REPLY = "reply", "The customer replied"

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="audit_events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )  # None: the desk itself (a timer, the sweep)
    action = models.CharField(max_length=20, choices=Action)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    seen = models.JSONField(default=dict, blank=True)  # what the actor was shown
    answer = models.JSONField(default=dict, blank=True)  # what they answered or changed
    checkpoint_id = models.CharField(max_length=64, blank=True)  # where the thread got after
    note = models.TextField(blank=True)
    # The ticket's amount at that moment: asked when opened, paid on an approval, asked on a
    # rejection, set by a fork, as it stood for the rest. Empty on rows written before it was
    # kept (the CSV then reads it from `answer`/`seen`, never from today's ticket).
    amount_cents = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["ticket", "at"], name="audit_ticket_idx")]

    def __str__(self) -> str:
        who = self.actor or "the desk"
        return f"{self.get_action_display()} by {who} on {self.ticket_id} at {local_words(self.at)}"


class SweepRun(models.Model):
    """When a periodic sweep last ran, one row per sweep: /readyz reports a schedule that stopped
    (no beat holds the lock, no housekeeping worker runs it), which nothing else shows."""

    name = models.CharField(max_length=40, primary_key=True)
    ran_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {local_words(self.ran_at)}"


class ReconcileRun(models.Model):
    """One run of `reconcile` and what it said, saved by the run itself (the command and the
    daily task alike) for /ops/reconcile/. Every run is kept: one small row a day."""

    class By(models.TextChoices):
        BEAT = "beat", "the daily beat"
        COMMAND = "command", "manage.py reconcile"

    by = models.CharField(max_length=10, choices=By.choices)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    since = models.DateTimeField()  # the orders charged since then were looked at
    orders = models.PositiveIntegerField(default=0)
    lines = models.JSONField(default=list)  # the report as printed (and emailed)
    problems = models.JSONField(default=list)  # each one in words, also among the lines
    open_disputes = models.JSONField(default=list)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"reconcile by {self.by} at {local_words(self.started_at)}"

    def marked_lines(self) -> list[tuple[str, str]]:
        """Each line with what it is ("problem", "dispute" or ""), for the page to mark."""
        problems = {f"- {words}" for words in self.problems}
        disputes = {f"- {words}" for words in self.open_disputes}
        return [
            (line, "problem" if line in problems else "dispute" if line in disputes else "")
            for line in self.lines
        ]


class StripeEventQuerySet(models.QuerySet):
    def needing_worker(self, received_before=None) -> StripeEventQuerySet:
        """Events not handled yet that still have attempts left (received before a time)."""
        rows = self.filter(handled_at__isnull=True, attempts__lt=settings.REFUNDS_MAX_ATTEMPTS)
        return rows if received_before is None else rows.filter(received_at__lt=received_before)


class StripeEvent(models.Model):
    """One of Stripe's events, stored once by its id as it came (signature checked) and handled
    by a worker: a resent event is the first one. `handled_at` empty: a worker has yet to handle
    it (the recovery sweep hands it on, as it does tickets)."""

    event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=100)
    created = models.DateTimeField()  # when Stripe made it
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
    handled_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=300, blank=True)  # what the handler recorded
    handle_error = models.TextField(blank=True)  # the last attempt's, while one fails
    attempts = models.PositiveIntegerField(default=0)
    woken_at = models.DateTimeField(null=True, blank=True)  # the sweep's last wake-up

    objects = StripeEventQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["handled_at"], name="stripe_event_unhandled_idx")]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


# The demo processor's table lives beside its gateway; Django registers a model when the app's
# models module imports it.
from refunds.payments.demo import DemoProcessorDispute, DemoProcessorRefund  # noqa: E402, F401
