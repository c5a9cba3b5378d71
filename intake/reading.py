"""What the reader found in a customer's message: the one shape both readers (rules, model)
return, the workflow stores (Message.reading, Ticket.reading) and the desk shows. No Django."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from refunds.policy import REASONS

RULES = "rules"  # read_by for the rules reader; a model's reading says its spec ("openai:gpt-x")


@dataclass(frozen=True)
class Reading:
    reason: str  # one of refunds.policy.REASONS
    orders: list[str]  # order numbers as the customer wrote them, without "#"
    amount_cents: int | None  # an amount the customer names, in the minor unit; None: none named
    language: str  # ISO 639-1 ("en", "es", ...)
    summary: str  # one line for the reviewer
    # Field name ("reason", "orders", "amount", "language") -> the words of the message it came
    # from, so a reviewer can see why the reader thought so.
    quotes: dict[str, str] = field(default_factory=dict)
    read_by: str = RULES
    # Why the model's reading was not used, when a model is configured and the rules read it
    # instead ("the model timed out after 10 s"); empty otherwise.
    fallback: str = ""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown reason {self.reason!r}")

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reading:
        known = {f: data[f] for f in cls.__dataclass_fields__ if f in data}
        return cls(**known)
