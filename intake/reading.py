"""What the reader found in a customer's message: the one shape both readers return. No Django."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from refunds.policy import REASONS


def sureness(confidence: float | None) -> str:
    """A confidence as people read it: "75%" (None: sure)."""
    return f"{round((1.0 if confidence is None else confidence) * 100)}%"


# Each reason's short name, for the readers' reports' columns (eval_intake, train_reader).
REASON_SHORT = {
    "late_delivery": "late",
    "damaged": "damaged",
    "not_received": "not_recv",
    "wrong_item": "wrong",
    "other": "other",
    "not_refund": "not_ref",
    "refund_status": "status",
}
TRAINED = "classifier"  # read_by for the default reader; a model's says its spec ("openai:gpt-x")


@dataclass(frozen=True)
class Reading:
    reason: str  # one of refunds.policy.REASONS
    orders: list[str]  # order numbers as the customer wrote them, without "#"
    amount_cents: int | None  # an amount the customer names, in the minor unit; None: none named
    language: str  # ISO 639-1 ("en", "es", ...)
    summary: str  # one line for the reviewer
    # Field name -> the message's words it came from, so a reviewer sees why.
    quotes: dict[str, str] = field(default_factory=dict)
    read_by: str = TRAINED
    # Why the model's reading was not used ("the model timed out after 10 s").
    fallback: str = ""
    # Below REFUNDS_READER_MIN_CONFIDENCE the message goes to "Needs sorting" with `unsure`.
    confidence: float = 1.0
    unsure: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown reason {self.reason!r}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be between 0 and 1, got {self.confidence!r}")

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reading:
        known = {f: data[f] for f in cls.__dataclass_fields__ if f in data}
        return cls(**known)
