"""POST bodies and search queries of the desk's pages, parsed by Django forms."""

from __future__ import annotations

import re

from django import forms

from refunds import currencies, services
from refunds.models import AuditEvent, CannedReason, Role, Ticket
from refunds.selectors import LineAsked
from refunds.services import returns


def cents(amount: str) -> int | None:
    """Dollars as typed ("12.50", "$12.50") to cents; None when empty; ValueError when not money."""
    if not (amount or "").strip():
        return None
    return currencies.read_typed(amount, currencies.DESK)


def order_numbers_typed(text: str) -> list[str]:
    """The order numbers typed in "Open a ticket": "1042, #1044; 1047"."""
    return [n.lstrip("#") for n in re.split(r"[\s,;]+", text or "") if n.lstrip("#")]


class DollarsField(forms.CharField):
    def clean(self, value):
        try:
            return cents(super().clean(value))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class DecideForm(forms.Form):
    interrupt_id = forms.CharField(max_length=64, required=False)
    reason = forms.CharField(required=False, strip=True)
    note = forms.CharField(required=False, strip=True)
    canned = forms.ModelChoiceField(CannedReason.objects.rejecting(), required=False)
    amount = forms.CharField(required=False, max_length=20)
    # "Ask the customer": a canned question, words of one's own, or both.
    question = forms.CharField(required=False, strip=True)
    canned_question = forms.ModelChoiceField(CannedReason.objects.asking(), required=False)


def review_answers(post, ticket: Ticket, button: str, data: dict) -> dict[str, dict]:
    """A review form's answer in the one shape (refunds/flow/answers.py), from the button
    pressed and the fields beside it; RefundError says what is wrong."""
    review = services.review_orders(ticket)
    reason, canned = data["reason"], data["canned"]
    if canned is not None and button in ("reject", "orders"):  # in the customer's language
        said = canned.text_in((ticket.reading or {}).get("language", "")) or canned.text
        reason = f"{said} {reason}".strip()
    amount: int | None = None
    try:
        orders = parts_answers(post, review) if button in ("approve", "orders") else {}
        if button == "orders":
            orders = _own_answers(post, review, orders)
        elif button == "approve" and not orders:
            amount = cents(data["amount"])
    except ValueError as exc:
        raise services.RefundError(str(exc)) from None
    answer = "" if button == "orders" else button
    return services.review_answers(
        ticket, answer=answer, reason=reason, amount_cents=amount, orders=orders or None
    )


def _own_answers(post, review: list, ticked: dict[str, dict]) -> dict[str, dict]:
    """Each open order's own answer (`order-<n>`), with `amount-<n>` and `reason-<n>`."""
    answers: dict[str, dict] = {}
    for line in review:
        if line.get("status") != "open":
            continue
        number = str(line["number"])
        one: dict = {"answer": post.get(f"order-{number}", "")}
        why = (post.get(f"reason-{number}") or "").strip()
        if why:
            one["reason"] = why
        if one["answer"] == "approve" and number in ticked:
            one["parts"] = ticked[number]["parts"]
        elif one["answer"] == "approve":
            try:
                one["amount_cents"] = cents(post.get(f"amount-{number}", ""))
            except ValueError as exc:
                raise ValueError(f"Order {number}: {exc}") from None
        answers[number] = one
    return answers


def parts_answers(post, lines: list) -> dict[str, dict]:
    """The approval of each open order whose parts form was posted (`parts-<n>`); an amount
    left empty pays what the proposal pays for those units, else their full price."""
    orders: dict[str, dict] = {}
    for line in lines:
        number = str(line["number"])
        if line.get("status") != "open" or f"parts-{number}" not in post:
            continue
        prefix = f"part-{number}-"
        # The boxes beside the parts: a return first; store credit offered.
        on_return = bool(post.get(prefix + "on_return"))
        offer = bool(post.get(prefix + "offer_credit"))
        if post.get(prefix + "whole"):
            orders[number] = {
                "answer": "approve",
                "parts": [{"whole_order": True}],
                "on_return": on_return,
                "offer_credit": offer,
            }
            continue
        proposed = {
            (p.get("line"), p.get("quantity")): p["amount_cents"] for p in line.get("parts") or []
        }
        parts = [
            part
            for bought in (line.get("order") or {}).get("lines") or []
            if (part := _line_part(post, prefix, number, bought, proposed))
        ]
        if post.get(prefix + "shipping"):
            fee = proposed.get((None, None))
            parts.append({"shipping": True} | ({} if fee is None else {"amount_cents": fee}))
        if not parts:
            raise ValueError(f"Order {number}: tick what to refund, or reject it.")
        orders[number] = {
            "answer": "approve",
            "parts": parts,
            "on_return": on_return,
            "offer_credit": offer,
        }
    return orders


def _line_part(post, prefix: str, number: str, bought: dict, proposed: dict) -> dict | None:
    """One bought line's part as posted, or None when none of it is refunded."""
    raw = (post.get(f"{prefix}qty-{bought['id']}") or "0").strip()
    if not (raw.isascii() and raw.isdigit()):  # "²" is a digit to Python, not to int()
        raise ValueError(f"Order {number}: the quantity of {bought['title']} is a whole number.")
    try:
        amount = cents(post.get(f"{prefix}amount-{bought['id']}", ""))
    except ValueError as exc:
        raise ValueError(f"Order {number}: {bought['title']}: {exc}") from None
    if not int(raw):
        if amount is not None:
            raise ValueError(
                f"Order {number}: give how many {bought['title']} the amount is for, or "
                "leave the amount empty."
            )
        return None
    restock = bool(post.get(f"{prefix}restock-{bought['id']}"))
    amount = proposed.get((bought["id"], int(raw))) if amount is None else amount
    part = {"line": bought["id"], "quantity": int(raw), "restock": restock}
    return part | ({} if amount is None else {"amount_cents": amount})


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


SORTS = {  # a sort's label, and the order it puts the tickets in
    "newest": ("Newest first", ("-id",)),
    "oldest": ("Oldest first", ("id",)),
    "amount_high": ("Largest amount", ("-amount_cents", "-id")),
    "amount_low": ("Smallest amount", ("amount_cents", "id")),
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
    min_amount = DollarsField(required=False, max_length=12, label="From $")
    max_amount = DollarsField(required=False, max_length=12, label="To $")
    mine = forms.BooleanField(required=False, label="Opened by me")
    decided = forms.BooleanField(required=False, label="Decided by me")
    sort = forms.ChoiceField(
        choices=[(value, label) for value, (label, _) in SORTS.items()],
        required=False,
        label="Sort",
    )


class AuditSearch(forms.Form):
    action = forms.ChoiceField(
        choices=[("", "Any action"), *AuditEvent.Action.choices], required=False
    )
    actor = forms.CharField(required=False, max_length=150, label="Who (user name)")
    ticket = forms.IntegerField(required=False, min_value=1, label="Ticket")
    since = forms.DateField(required=False, label="From (date)")
    until = forms.DateField(required=False, label="To (date)")


class ReturnForm(forms.Form):
    """The returns page's word on a parcel: its reference and, to flag it, why."""

    reference = forms.CharField(max_length=40, strip=True)
    reason = forms.CharField(required=False, strip=True, max_length=returns.REASON_MAX)


def return_field(line: LineAsked) -> str:
    return f"back-{line.order}-{line.line}"


def return_backs(post, lines: list[LineAsked]) -> list[services.Back] | None:
    """Each line's units typed on the returns page; None when they are all that was asked back
    (the same word as a scan of the label). ValueError names a box that is not a count."""
    backs = []
    for line in lines:
        typed = (post.get(return_field(line)) or "0").strip()
        if not (typed.isascii() and typed.isdigit()):
            raise ValueError(
                f"{line.title or 'Line ' + str(line.line)}: type how many came back, a whole "
                f"number from 0 to {line.quantity}."
            )
        backs.append(services.Back(quantity=int(typed), line=line.line, order=line.order))
    if all(b.quantity == line.quantity for b, line in zip(backs, lines, strict=True)):
        return None
    return backs
