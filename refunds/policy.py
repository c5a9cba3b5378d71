"""The agent limit, its words, and who reviews what: the one home of these rules (DESIGN.md
invariant 11). Nothing Django at import: refunds/flow/ imports this and stays Django-free."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from refunds.flow import parts as refund_parts
from refunds.flow.words import and_words, dollars, numbers_words

if TYPE_CHECKING:
    from refunds.flow.state import CustomerHistory, LineFacts, OrderFacts, Part, ReturnRule

# Support agents decide refunds up to this much (REFUNDS_AGENT_LIMIT_CENTS); above, a manager.
DEFAULT_AGENT_LIMIT_CENTS = 2000

ReviewRole = Literal["agent", "manager"]

LATE_DELIVERY = "late_delivery"
DAMAGED = "damaged"
NOT_RECEIVED = "not_received"
WRONG_ITEM = "wrong_item"
OTHER_REQUEST = "other"
NOT_REFUND = "not_refund"
# Asks where a refund already asked for is: answered with its ticket's status, never a ticket.
REFUND_STATUS = "refund_status"

# Value -> the desk's words, in the order the desk's pickers list them.
REASONS: dict[str, str] = {
    LATE_DELIVERY: "Late delivery",
    DAMAGED: "Damaged",
    NOT_RECEIVED: "Not received",
    WRONG_ITEM: "Wrong item",
    OTHER_REQUEST: "Another request",
    NOT_REFUND: "Not about a refund",
    REFUND_STATUS: "Asks where a refund is",
}
# Reasons a manager judges with the reading beside them, whatever the amount.
MANAGER_REASONS = frozenset({DAMAGED, NOT_RECEIVED, WRONG_ITEM, OTHER_REQUEST})
TICKET_REASONS = tuple(r for r in REASONS if r not in (NOT_REFUND, REFUND_STATUS))


def return_first(
    rule: ReturnRule, reason: str, parts: list[Part], history: CustomerHistory
) -> bool:
    """Whether the policy proposes refunding these parts once their lines come back."""
    if not any(p.get("line") for p in parts):
        return False  # only items come back
    amount = refund_parts.total(parts)
    return (
        reason in rule.reasons
        or (rule.from_cents is not None and amount >= rule.from_cents)
        or (
            rule.after_recent_refunds is not None
            and history.get("recent", 0) >= rule.after_recent_refunds
        )
    )


def agent_limit_cents() -> int:
    """The limit in force, from the setting; a bad one stops the caller with its name."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    value = getattr(settings, "REFUNDS_AGENT_LIMIT_CENTS", DEFAULT_AGENT_LIMIT_CENTS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImproperlyConfigured(
            f"REFUNDS_AGENT_LIMIT_CENTS must be a whole number of cents, at least 1; got {value!r}"
        )
    return value


def review_role(
    amount_cents: int, *, flagged: bool, limit_cents: int, reason: str = LATE_DELIVERY
) -> ReviewRole:
    """A manager reviews a refund over the limit, flagged or for MANAGER_REASONS; else an agent."""
    if reason in MANAGER_REASONS or flagged or amount_cents > limit_cents:
        return "manager"
    return "agent"


def within_words(limit_cents: int | None = None) -> str:
    """ "$20.00 or less": what support agents decide."""
    return f"{dollars(_limit(limit_cents))} or less"


def over_words(limit_cents: int | None = None) -> str:
    """ "over $20.00": what goes to managers for its amount alone."""
    return f"over {dollars(_limit(limit_cents))}"


def why_words(
    amount_cents: int, *, flagged: bool, limit_cents: int, reason: str = LATE_DELIVERY
) -> str:
    """Why triage chose its reviewer, for the thread's notes."""
    if reason in MANAGER_REASONS:
        return f"for a report of {REASONS[reason].lower()}, which a manager judges"
    if amount_cents > limit_cents:
        return over_words(limit_cents)
    return "flagged by policy" if flagged else within_words(limit_cents)


def _limit(limit_cents: int | None) -> int:
    return agent_limit_cents() if limit_cents is None else limit_cents


def scope_sentence(*, agent: bool, manager: bool, admin: bool) -> str:
    """One sentence on what a user's review queue holds, so an empty queue is not a mystery."""
    if admin or (agent and manager):
        return (
            f"You see every pending review: support agents decide refunds of {within_words()}, "
            "managers the larger ones and those the policy flags."
        )
    if agent:
        return f"You decide refunds of {within_words()}; larger and flagged ones go to managers."
    if manager:
        return (
            f"You decide refunds {over_words()} and those the policy flags; smaller ones go to "
            "support agents."
        )
    return "You are in no reviewer group, so no review waits on you; you can still open tickets."


def refusal_sentence(role: str, *, reason: str = LATE_DELIVERY) -> str:
    """Why a reviewer of the other level may not decide a review of `role`."""
    if role == "manager" and reason in MANAGER_REASONS:
        return (
            f"This refund is decided by a manager: the customer reports it as "
            f"{REASONS[reason].lower()}, which a manager judges with the reading."
        )
    if role == "manager":
        return f"This refund is decided by a manager (it is {over_words()} or flagged by policy)."
    return f"This refund is decided by a support agent ({within_words()})."


def role_help() -> str:
    """The API schema's words for `required_role`."""
    return (
        f"Who reviews the refund: `agent` for {within_words()}, `manager` for refunds "
        f"{over_words()}, flagged by policy, asked for another reason than a late delivery, or "
        "after a charge was refused. Null before triage."
    )


def routes_by_lateness(reason: str) -> bool:
    """A late delivery goes through the lateness rules; other reasons go to a manager."""
    return reason not in MANAGER_REASONS


def reason_sentence(reason: str) -> str:
    """What the policy does with a ticket of this reason, for the thread's notes and the card."""
    if reason in MANAGER_REASONS:
        return (
            f"Reported as {REASONS[reason].lower()}: a manager decides it with the reading, "
            "whatever the lateness."
        )
    if reason == NOT_REFUND:
        return "Not about a refund: no ticket is opened."
    return "Reason: late delivery. The lateness rules decide it."


_WHOLE_PARCEL = re.compile(
    r"\b(empty|never (came|arrived|got here)|did ?n.?t (come|arrive|get here)|not (come|arrive)"
    r"|nothing (was )?(in|inside)|lost|no parcel|no package"
    r"|(parcel|package|order|delivery|shipment) (is |was |got )?missing)\b"
)
# A part of the parcel missing, as the intake's reader words "not received" (its vocabulary.py).
_PART_MISSING = re.compile(
    r"\b(missing|not in the (box|parcel|package)|without the"
    r"|falta(ba|n|ban|va|m|vam)?|manqu(e|ait|aient|ent)|fehl(t|te|ten)|manca(va|no|vano)?)\b"
)
_NOT_A_NAME = frozenset(
    {"the", "and", "with", "for", "set", "pack", "size", "item", "black", "white"}
)


def proposed_parts(
    reason: str, order: OrderFacts, words: str, *, late_by_days: int
) -> tuple[list[Part], str]:
    """What the desk proposes of one order, and why: never more than is left of what was paid."""
    parts, why = _proposed_parts(reason, order, words, late_by_days=late_by_days)
    paid = order.get("paid_cents")
    total = sum(p["amount_cents"] for p in parts)
    if paid is None or not parts:
        return parts, why
    left = paid_left(order) or 0
    if total <= left:
        return parts, why
    if not left:
        return [], "What the customer paid was refunded in full already: nothing is proposed."
    return scaled(parts, left), (
        f"{why} Capped at the {dollars(left)} left of the {dollars(paid)} the customer paid "
        f"(the parts' full prices come to {dollars(total)})."
    )


def scaled(parts: list[Part], cents: int) -> list[Part]:
    """The parts scaled down to add up to `cents`, the cents left over to the first ones."""
    total = sum(p["amount_cents"] for p in parts)
    shares = [p["amount_cents"] * cents // total for p in parts]
    for i in range(cents - sum(shares)):
        shares[i % len(shares)] += 1
    return [
        {**part, "amount_cents": share} for part, share in zip(parts, shares, strict=True) if share
    ]


def _proposed_parts(
    reason: str, order: OrderFacts, words: str, *, late_by_days: int
) -> tuple[list[Part], str]:
    """What each reason calls for; an order without lines has only its shipping fee."""
    fee_left = shipping_left(order)
    shipping = [refund_parts.shipping(fee_left)] if fee_left else []
    lines = [line for line in order.get("lines") or [] if units_left(line)]
    if reason == LATE_DELIVERY or not order.get("lines"):
        if reason == LATE_DELIVERY and late_by_days <= 0:
            return [], "Delivered on time: nothing is proposed."
        why = "Late delivery: the shipping fee."
        if reason != LATE_DELIVERY:
            why = "The shop sent no items for this order: only its shipping fee can be refunded."
        return shipping, why if shipping else "The shipping fee was already refunded in full."
    if reason == OTHER_REQUEST:
        return [], "Another request: nothing is proposed; choose what to refund."
    named, unsure = _named_lines(lines, words)
    said = words.lower()
    if (
        reason == NOT_RECEIVED
        and not named
        and (_WHOLE_PARCEL.search(said) or not (unsure or _PART_MISSING.search(said)))
    ):
        return whole_order(order), "Not received: the whole order, its items and its shipping."
    if not named:
        return [], (
            "The message does not say for sure which items it means: nothing is ticked; "
            "choose what to refund."
        )
    titles = and_words([line["title"] for line in named])
    what = "missing" if reason == NOT_RECEIVED else REASONS[reason].lower()
    return [_all_of(line) for line in named], f"The customer reports {titles} as {what}."


def parts_checked(order: OrderFacts, given: object) -> list[Part]:
    """The one check of the parts a reviewer gives (API, form, re-run review node), in words."""
    number = order["number"]
    if not isinstance(given, list) or not given or not all(isinstance(p, dict) for p in given):
        raise ValueError(f'Order {number}: give the parts as a list, like [{{"shipping": true}}].')
    if any(p.get("whole_order") for p in given):
        return _whole_checked(order, given)
    parts: list[Part] = []
    for one in given:
        extra = sorted(set(one) - {"line", "quantity", "amount_cents", "restock", "shipping"})
        if extra:
            raise ValueError(f"Order {number}: unknown field(s) {', '.join(extra)} in a part.")
        amount = one.get("amount_cents")
        if amount is not None and (isinstance(amount, bool) or not isinstance(amount, int)):
            raise ValueError(f"Order {number}: an amount must be in cents, a whole number.")
        shipping = one.get("shipping") is True and "line" not in one
        part = (_shipping_checked if shipping else _line_checked)(order, one, amount)
        key = part.get("line", "shipping")
        if key in [p.get("line", "shipping") for p in parts]:
            line = _line(order, key)
            what = line["title"] if line else "the shipping fee"
            raise ValueError(f"Order {number}: {what} is given twice.")
        parts.append(part)
    paid, left = order.get("paid_cents"), paid_left(order)
    if paid is not None and left is not None and refund_parts.total(parts) > left:
        raise ValueError(
            f"Order {number}: {dollars(left)} is left of the {dollars(paid)} the customer paid; "
            f"these parts come to {dollars(refund_parts.total(parts))}."
        )
    return parts


def _whole_checked(order: OrderFacts, given: list[dict]) -> list[Part]:
    number = order["number"]
    if len(given) != 1 or set(given[0]) != {"whole_order"} or given[0]["whole_order"] is not True:
        raise ValueError(f"Order {number}: the whole order is a part of its own; give it alone.")
    whole = whole_order(order)
    left = paid_left(order)
    if not whole or left == 0:
        raise ValueError(f"Order {number} was refunded in full already.")
    # A money rule: the whole order is what is left of what was paid, scaled as the proposal.
    return whole if left is None or left >= refund_parts.total(whole) else scaled(whole, left)


def _shipping_checked(order: OrderFacts, one: dict, amount: int | None) -> Part:
    number, fee_left = order["number"], shipping_left(order)
    if not fee_left:
        raise ValueError(f"Order {number}: its shipping fee was refunded already.")
    amount = fee_left if amount is None else amount
    if not 0 < amount <= fee_left:
        raise ValueError(
            f"Order {number}: the shipping part must be more than $0.00 and at most "
            f"{dollars(fee_left)}."
        )
    return refund_parts.shipping(amount)


def _line_checked(order: OrderFacts, one: dict, amount: int | None) -> Part:
    number, line_id = order["number"], one.get("line")
    if isinstance(line_id, bool) or not isinstance(line_id, int) or "shipping" in one:
        raise ValueError(
            f"Order {number}: a part is a line (with its id), the shipping or the whole order."
        )
    line = _line(order, line_id)
    if line is None:
        raise ValueError(f"Order {number} has no line {line_id}.")
    units = one.get("quantity")
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise ValueError(f"Order {number}: the quantity of {line['title']} must be 1 or more.")
    if units > units_left(line):
        raise ValueError(
            f"Order {number}: only {units_left(line)} of the {line['quantity']} x "
            f"{line['title']} are left to refund."
        )
    price = _price(line, units)
    amount = price if amount is None else amount
    if not 0 < amount <= price:
        raise ValueError(
            f"Order {number}: {units} x {line['title']} must be more than $0.00 and at most "
            f"{dollars(price)}."
        )
    restock = one.get("restock", False)
    if not isinstance(restock, bool):
        raise ValueError(f"Order {number}: restock is true or false.")
    return {"line": line_id, "quantity": units, "amount_cents": amount, "restock": restock}


def _line(order: OrderFacts, line_id: object) -> LineFacts | None:
    return next((line for line in order.get("lines") or [] if line["id"] == line_id), None)


def whole_order(order: OrderFacts) -> list[Part]:
    """Every line's units left and the shipping fee left, part by part."""
    whole = [_all_of(line) for line in order.get("lines") or [] if units_left(line)]
    fee_left = shipping_left(order)
    return whole + ([refund_parts.shipping(fee_left)] if fee_left else [])


def parts_for_amount(order: OrderFacts, proposal: list[Part], amount_cents: int) -> list[Part]:
    """The parts an admin's forked amount refunds: the proposal or the whole order scaled to it."""
    base = proposal if refund_parts.total(proposal) >= amount_cents else whole_order(order)
    if not order.get("lines") or refund_parts.total(base) < amount_cents:
        return [refund_parts.shipping(amount_cents)]
    return base if refund_parts.total(base) == amount_cents else scaled(base, amount_cents)


def parts_left(order: OrderFacts, parts: list[Part]) -> int | None:
    """What is left of what the customer paid after these parts; None when not said."""
    left = paid_left(order)
    return None if left is None else max(left - refund_parts.total(parts), 0)


def paid_left(order: OrderFacts) -> int | None:
    """What the customer paid, less the ledger's and outside refunds; None when not said."""
    paid = order.get("paid_cents")
    if paid is None:
        return None
    return max(paid - order["refunded_cents"] - order.get("outside_refunded_cents", 0), 0)


def shipping_left(order: OrderFacts) -> int:
    """The shipping fee less what the ledger held of it when the order was checked."""
    held = order.get("shipping_refunded_cents", order["refunded_cents"])
    return max(order["fee_cents"] - held, 0)


def units_left(line: LineFacts) -> int:
    """Units of a line bought, less what the ledger held of them when the order was checked."""
    return max(line["quantity"] - line["refunded_quantity"], 0)


def _all_of(line: LineFacts) -> Part:
    units = units_left(line)
    return {"line": line["id"], "quantity": units, "amount_cents": _price(line, units)}


def _price(line: LineFacts, units: int) -> int:
    """What `units` of the line cost with their tax, of what is left of it (flow/parts.py)."""
    return refund_parts.line_price(
        line["unit_price_cents"], line["quantity"], line["tax_cents"], units, line["refunded_cents"]
    )


def _named_lines(lines: list[LineFacts], words: str) -> tuple[list[LineFacts], bool]:
    """The lines the words name (a SKU, or a title word no other line has), and whether unsure."""
    said = set(re.findall(r"[a-z0-9][a-z0-9-]*", words.lower()))
    said |= {w[:-1] for w in said if w.endswith("s")} | {w[:-2] for w in said if w.endswith("es")}

    def title_words(line: LineFacts) -> set[str]:
        found = re.findall(r"[a-z0-9]+", line["title"].lower())
        return {w for w in found if len(w) >= 3 and w not in _NOT_A_NAME}

    everyone = [title_words(line) for line in lines]
    named, unsure = [], False
    for line, own in zip(lines, everyone, strict=True):
        others = set().union(*(w for w in everyone if w is not own))
        if (line["sku"] and line["sku"].lower() in said) or (own - others) & said:
            named.append(line)
        elif own & said:
            unsure = True
    return ([], True) if unsure else (named, False)


def paid_out_words(
    amount_cents: int | None,
    orders: list[str],
    *,
    asked_cents: int | None = None,
    rejected: list[str] | tuple[str, ...] = (),
    undo_seconds: int = 0,
) -> str:
    """What every page says of an approval: "Approved $6.99 for order 1042 — being paid out"."""
    lowered = (
        f" (instead of {dollars(asked_cents)})" if asked_cents not in (None, amount_cents) else ""
    )
    also = f", rejected {', '.join(rejected)}" if rejected else ""
    when = (
        f"paid out in {undo_seconds} second{'s' if undo_seconds != 1 else ''} unless you undo it"
        if undo_seconds
        else "being paid out"
    )
    return f"Approved {dollars(amount_cents)}{lowered} for {numbers_words(orders)}{also} — {when}"
