"""POST bodies and search queries of the desk's pages, parsed by Django forms."""

from __future__ import annotations

import re

from django import forms

from refunds import currencies, policy
from refunds.models import AuditEvent, CannedReason, Role, Ticket


def cents(amount: str) -> int | None:
    """Dollars as typed ("12.50", "$12.50") to cents; None when empty; ValueError (a
    currencies.BadAmount, saying why) when not money."""
    if not (amount or "").strip():
        return None
    return currencies.read_typed(amount, currencies.DESK)


def order_numbers_typed(text: str) -> list[str]:
    """The order numbers typed in "Open a ticket": "1042, 1044 1047" (commas, semicolons or
    spaces between them, a "#" before one allowed); ticket_open says what is wrong with them."""
    return [n.lstrip("#") for n in re.split(r"[\s,;]+", text or "") if n.lstrip("#")]


class DecideForm(forms.Form):
    interrupt_id = forms.CharField(max_length=64, required=False)
    reason = forms.CharField(required=False, strip=True)
    note = forms.CharField(required=False, strip=True)
    canned = forms.ModelChoiceField(CannedReason.objects.rejecting(), required=False)
    amount = forms.CharField(required=False, max_length=20)
    # "Ask the customer": a canned question, words of one's own, or both.
    question = forms.CharField(required=False, strip=True)
    canned_question = forms.ModelChoiceField(CannedReason.objects.asking(), required=False)

    def answer(self, post) -> str:
        """The button pressed: one of approve, reject, escalate, orders (the answers per order
        of a ticket of several), ask; "" for none; "both" for two."""
        pressed = [a for a in ("approve", "reject", "escalate", "orders", "ask") if a in post]
        if len(pressed) > 1:
            return "both"
        return pressed[0] if pressed else ""


def order_answers(post, lines: list[dict]) -> dict[str, dict]:
    """The answers per open order a review form posts (`order-<number>`: approve or reject;
    `amount-<number>`: dollars, for those who may lower it), checked by the rule the service
    and the graph use (policy.order_answers_checked); ValueError says what is wrong."""
    given: dict[str, dict] = {}
    asked: dict[str, int] = {}
    for line in lines:
        if line.get("status") != "open":
            continue
        number = str(line["number"])
        asked[number] = int(line.get("amount_cents") or 0)
        one: dict = {"answer": post.get(f"order-{number}", "")}
        if one["answer"] == "approve":
            try:
                one["amount_cents"] = cents(post.get(f"amount-{number}", ""))
            except ValueError as exc:
                raise ValueError(f"Order {number}: {exc}") from None
        given[number] = one
    return policy.order_answers_checked(asked, given)


def names_parts(post) -> bool:
    """Whether a review form posts the parts of an order (its parts form: `parts-<number>`)."""
    return any(key.startswith("parts-") for key in post)


def parts_answers(post, lines: list[dict]) -> dict[str, dict]:
    """The approval of each open order whose parts form was posted: `part-<n>-whole` (the whole
    order), else `part-<n>-qty-<line>` units (0: not refunded), `part-<n>-amount-<line>`
    (dollars for those units, left empty: their full price), `part-<n>-restock-<line>` and
    `part-<n>-shipping`. Checked by the service as the API's parts are
    (policy.parts_checked); an order without its parts form gets the decision's answer."""
    orders: dict[str, dict] = {}
    for line in lines:
        number = str(line["number"])
        if line.get("status") != "open" or f"parts-{number}" not in post:
            continue
        prefix = f"part-{number}-"
        if post.get(prefix + "whole"):
            orders[number] = {"answer": "approve", "parts": [{"whole_order": True}]}
            continue
        parts: list[dict] = []
        for bought in (line.get("order") or {}).get("lines") or []:
            raw = (post.get(f"{prefix}qty-{bought['id']}") or "0").strip()
            if not raw.isdigit():
                raise ValueError(
                    f"Order {number}: the quantity of {bought['title']} is a whole number."
                )
            try:
                amount = cents(post.get(f"{prefix}amount-{bought['id']}", ""))
            except ValueError as exc:
                raise ValueError(f"Order {number}: {bought['title']}: {exc}") from None
            if int(raw):
                restock = bool(post.get(f"{prefix}restock-{bought['id']}"))
                part = {"line": bought["id"], "quantity": int(raw), "restock": restock}
                parts.append(part | ({} if amount is None else {"amount_cents": amount}))
            elif amount is not None:
                raise ValueError(
                    f"Order {number}: give how many {bought['title']} the amount is for, or "
                    "leave the amount empty."
                )
        if post.get(prefix + "shipping"):
            parts.append({"shipping": True})
        if not parts:
            raise ValueError(f"Order {number}: tick what to refund, or reject it.")
        orders[number] = {"answer": "approve", "parts": parts}
    return orders


class _AnyPicks(forms.MultipleChoiceField):
    def valid_value(self, value: str) -> bool:
        return True  # the choices are the queue's rows of the moment: clean_pick checks them


class BulkForm(forms.Form):
    pick = _AnyPicks(required=False)  # "<ticket id>:<interrupt id>"

    def clean_pick(self) -> list[tuple[int, str]]:
        picks = []
        for raw in self.cleaned_data["pick"][:200]:
            pk, _, interrupt_id = raw.partition(":")
            if pk.isdigit() and interrupt_id:
                picks.append((int(pk), interrupt_id[:64]))
        return picks


SORTS = {
    "newest": ("-id",),
    "oldest": ("id",),
    "amount_high": ("-amount_cents", "-id"),
    "amount_low": ("amount_cents", "id"),
}
AGES = {"1h": 1, "24h": 24, "7d": 24 * 7, "30d": 24 * 30}


class TicketSearch(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search")
    status = forms.ChoiceField(choices=[("", "Any status"), *Ticket.Status.choices], required=False)
    role = forms.ChoiceField(
        choices=[("", "Any reviewer"), *Role.choices, ("escalated", "Escalated")],
        required=False,
        label="Reviewed by",
    )
    age = forms.ChoiceField(
        choices=[
            ("", "Any age"),
            ("1h", "Opened in the last hour"),
            ("24h", "Last 24 hours"),
            ("7d", "Last 7 days"),
            ("30d", "Last 30 days"),
            ("older", "Older than 30 days"),
        ],
        required=False,
        label="Opened",
    )
    min_amount = forms.CharField(required=False, max_length=12, label="From $")
    max_amount = forms.CharField(required=False, max_length=12, label="To $")
    mine = forms.BooleanField(required=False, label="Opened by me")
    decided = forms.BooleanField(required=False, label="Decided by me")
    sort = forms.ChoiceField(
        choices=[
            ("newest", "Newest first"),
            ("oldest", "Oldest first"),
            ("amount_high", "Largest amount"),
            ("amount_low", "Smallest amount"),
        ],
        required=False,
        label="Sort",
    )

    def clean_min_amount(self):
        return self._money("min_amount")

    def clean_max_amount(self):
        return self._money("max_amount")

    def _money(self, name):
        try:
            return cents(self.cleaned_data.get(name, ""))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class AuditSearch(forms.Form):
    action = forms.ChoiceField(
        choices=[("", "Any action"), *AuditEvent.Action.choices], required=False
    )
    actor = forms.CharField(required=False, max_length=150, label="Who (user name)")
    ticket = forms.IntegerField(required=False, min_value=1, label="Ticket")
    since = forms.DateField(required=False, label="From (date)")
    until = forms.DateField(required=False, label="To (date)")
