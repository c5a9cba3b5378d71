"""Orders as the shop sold them: their lines, numbers and customers."""

from __future__ import annotations

import re

from django.db import models
from django.db.models import F, Max, Q, Sum, Value
from django.db.models.functions import Upper

ORDER_NUMBER_MAX = 32
_NOT_IN_A_NUMBER = r"\s\u0000-\u001f\u007f-\u009f"
# One pattern for the code and the API's schema: " #1042 " is 1042; inside, no space and no
# control character (PostgreSQL refuses a NUL in any text: a 500).
ORDER_NUMBER_PATTERN = (
    rf"^\s*#*\s*([^{_NOT_IN_A_NUMBER}#][^{_NOT_IN_A_NUMBER}]{{0,{ORDER_NUMBER_MAX - 1}}})\s*$"
)
_ORDER_NUMBER = re.compile(ORDER_NUMBER_PATTERN)


def order_number_read(raw: object) -> str:
    """However it comes in (text or a whole number); ValueError says why it is not one."""
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
    """The same email address whatever its case; of_customer() is the same rule in SQL."""
    return email.strip().upper() == other.strip().upper()


def of_customer(queryset, email: str, *, field: str = "customer_email"):
    """same_customer through the UPPER index (iexact is a LIKE on SQLite, which cannot use it)."""
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
    payment_reference = models.CharField(max_length=255, blank=True)
    # Both null when the shop sent no lines: then only the fee is refundable.
    total_cents = models.PositiveIntegerField(null=True, blank=True)
    paid_cents = models.PositiveIntegerField(null=True, blank=True)
    # Its customer forgotten (ops/erasure.py): kept for the books, refunded no more.
    erased_at = models.DateTimeField(null=True, blank=True)

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
            # Case-insensitive lookups use these instead of reading every order.
            models.Index(Upper("customer_email"), name="order_email_upper_idx"),
            models.Index(Upper("number"), name="order_number_upper_idx"),
        ]
        # POST /api/orders/ needs it: the shop's integration has it, not the desk.
        permissions = [("push_orders", "Can push orders through the API")]

    def __str__(self) -> str:
        return f"Order {self.number}"

    def erased_words(self) -> str:
        """Why the desk refunds or changes this order no more ("" while its customer is known)."""
        if self.erased_at is None:
            return ""
        return (
            f"Order {self.number}'s customer was erased on {self.erased_at.date().isoformat()}: "
            "the desk keeps it for the books and refunds or changes it no more."
        )

    def refunded_cents(self) -> int:
        """What the ledger holds against this order: refunds paid, and charges under way."""
        charges = self.charges.holding_balance()
        return charges.aggregate(total=Sum("amount_cents"))["total"] or 0

    def facts(self, *, for_ticket: int | None = None, but_key: str = "") -> dict:
        """What lookup reads and the ledger checks (order locked), but `for_ticket`, `but_key`."""
        held = self.charges.holding_balance()
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
        if outside["cents"]:
            facts["outside_refunded_cents"] = outside["cents"]
        return facts | ({"paid_cents": self.paid_cents} if self.paid_cents is not None else {})


class OrderLine(models.Model):
    """One line of an order as the shop sent it (refunds.order_in.LineIn), in minor units."""

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
        return self.unit_price_cents * self.quantity + self.tax_cents
