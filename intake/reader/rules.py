"""The rules reader: deterministic, fast, no network. The embedded default, and what takes over
whenever a configured model fails or answers out of shape."""

from __future__ import annotations

import re

from intake.reading import RULES, Reading
from refunds import policy

# An order number as customers write it: "#1042", "order 1042", "order no. 1042".
_ORDER = re.compile(r"(?:#|\border\s*(?:no\.?|number|nr\.?)?\s*#?\s*)(\d{3,12})\b", re.I)
_AMOUNT = re.compile(r"\$\s?(\d{1,6})(?:[.,](\d{2}))?")

_REASON_WORDS: list[tuple[str, tuple[str, ...]]] = [
    (policy.DAMAGED, ("damaged", "broken", "smashed", "cracked")),
    (
        policy.WRONG_ITEM,
        ("wrong item", "wrong size", "wrong colour", "wrong color", "not what i ordered"),
    ),
    (
        policy.NOT_RECEIVED,
        (
            "never arrived",
            "not received",
            "never received",
            "didn't arrive",
            "did not arrive",
            "hasn't arrived",
            "has not arrived",
        ),
    ),
    (policy.LATE_DELIVERY, ("late", "delay", "delayed", "took a week", "took ages")),
]


def read(*, sender: str, subject: str, body: str) -> Reading:
    text = f"{subject}\n{body}"
    quotes: dict[str, str] = {}
    orders: list[str] = []
    for match in _ORDER.finditer(text):
        if match.group(1) not in orders:
            orders.append(match.group(1))
    if orders:
        quotes["orders"] = ", ".join(m.group(0).strip() for m in _ORDER.finditer(text))
    reason = policy.NOT_REFUND
    lowered = text.lower()
    for candidate, words in _REASON_WORDS:
        hit = next((w for w in words if w in lowered), None)
        if hit:
            reason, quotes["reason"] = candidate, hit
            break
    else:
        if "refund" in lowered:
            reason, quotes["reason"] = policy.OTHER_REQUEST, "refund"
    amount = None
    if found := _AMOUNT.search(text):
        amount = int(found.group(1)) * 100 + int(found.group(2) or 0)
        quotes["amount"] = found.group(0)
    first_line = next((line.strip() for line in body.splitlines() if line.strip()), subject)
    return Reading(
        reason=reason,
        orders=orders,
        amount_cents=amount,
        language="en",
        summary=first_line[:200],
        quotes=quotes,
        read_by=RULES,
    )
