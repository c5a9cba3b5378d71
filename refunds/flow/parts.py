"""The parts of an order's refund (state.Part). No Django."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from refunds.flow.state import Part
from refunds.flow.words import dollars


def shipping(amount_cents: int) -> Part:
    """The shipping fee, or `amount_cents` of it: what every refund was before lines."""
    return {"shipping": True, "amount_cents": amount_cents}


def or_shipping(parts: list[Part] | None, amount_cents: int) -> list[Part]:
    """The parts of a refund; none given is the shipping fee for the amount."""
    return list(parts) if parts else [shipping(amount_cents)]


def total(parts: list[Part]) -> int:
    return sum(p["amount_cents"] for p in parts)


def only_shipping(parts: list[Part]) -> bool:
    return len(parts) == 1 and bool(parts[0].get("shipping"))


def digest(parts: list[Part]) -> str:
    """A short fingerprint of a set of parts, the same whatever their order."""
    canonical = sorted(
        (
            p.get("line") or 0,
            p.get("quantity") or 0,
            p["amount_cents"],
            bool(p.get("restock")),
        )
        for p in parts
    )
    return hashlib.sha256(json.dumps(canonical).encode()).hexdigest()[:12]


def line_price(
    unit_cents: int, bought: int, tax_cents: int, units: int, held_cents: int = 0
) -> int:
    """The most `units` refund for: price and tax share (rounded up), within what is left."""
    share = unit_cents * units + -(-tax_cents * units // bought)
    return max(min(share, unit_cents * bought + tax_cents - held_cents), 0)


def metadata(parts: Sequence[Part]) -> dict[str, str]:
    """For the shop's books ("11x2,12x1,shipping"); Stripe keeps values to 500 characters."""
    if not parts:
        return {}
    said = [f"{p['line']}x{p.get('quantity', 0)}" if p.get("line") else "shipping" for p in parts]
    back = [str(p["line"]) for p in parts if p.get("line") and p.get("restock")]
    return {"parts": ",".join(said)[:500]} | ({"restock": ",".join(back)[:500]} if back else {})


def words(
    parts: Sequence[Part], titles: Mapping[int, str], *, on_return: bool = False
) -> list[str]:
    """A refund's parts in the desk's words: "1 x Ceramic vase, $24.00, comes back"; on
    return, each line is refunded once it is back."""
    said = []
    for part in parts:
        if not part.get("line"):
            said.append(f"shipping, {dollars(part['amount_cents'])}")
            continue
        title = titles.get(part["line"]) or f"line {part['line']}"
        back = "comes back" if part.get("restock") else "stays with the customer"
        if on_return:
            back = "refunded once it is back"
        said.append(f"{part.get('quantity', 0)} x {title}, {dollars(part['amount_cents'])}, {back}")
    return said
