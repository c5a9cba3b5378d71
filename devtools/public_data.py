"""The public customer-support data mapped to the desk's readings (`manage.py map_public_data`):
Bitext's customer-support set and BANKING77's training split, as labelled lines in
eval_intake's format, split by intake.reader.training.part_of into tests/data/public/train.jsonl
and dev.jsonl.

The mapping: a refund asked for (`get_refund`, `request_refund`) is "other" unless its words name
a reason the desk has (NAMED); one asked after (`track_refund`, `Refund_not_showing_up`) is
"refund_status"; every other intent, `check_refund_policy` included, is "not_refund". An order
number is kept where Bitext marks one (`entity_type` order_id) and the text holds it."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from intake.reader.trained import text_of
from intake.reader.training import part_of
from refunds import policy

BITEXT = "bitext-customer-support-70pct.csv"
BANKING77 = "banking77-train.csv"
LICENCES = ("bitext-LICENSE.txt", "banking77-LICENSE.txt")
REQUESTS = {"get_refund", "request_refund"}
STATUS = {"track_refund", "Refund_not_showing_up"}
# A reason the words of a refund request name, first match wins: "has not arrived yet" is a
# parcel not received; the customer's own wrong choice ("I bought the wrong size") is not a
# wrong item sent, and stays "other".
NAMED = [
    (
        policy.NOT_RECEIVED,
        re.compile(
            r"\b(?:not|never|n't)\s+(?:yet\s+)?(?:received|arrived|gotten|got|come)\b"
            r"|\bstill\s+(?:not|hasn't|has\s+not|have\s+not|haven't)\s+(?:\w+\s+)?arrived\b",
            re.I,
        ),
    ),
    (
        policy.WRONG_ITEM,
        re.compile(r"\b(?:received|got|sent\s+me|delivered)\s+the\s+wrong\b", re.I),
    ),
    (policy.DAMAGED, re.compile(r"\b(?:faulty|damaged|broken|defective)\b", re.I)),
    (policy.LATE_DELIVERY, re.compile(r"\b(?:late|delayed)\b", re.I)),
]


@dataclass(frozen=True)
class Mapped:
    body: str
    orders: list[str]
    reason: str
    source: str  # "bitext" or "banking77"
    intent: str  # the set's own label

    def line(self) -> str:
        data = {
            "body": self.body,
            "orders": self.orders,
            "reason": self.reason,
            "source": self.source,
            "intent": self.intent,
        }
        return json.dumps(data, ensure_ascii=False)


def reading(intent: str, text: str) -> str:
    """The desk's reading of a message the public set labels `intent`."""
    if intent in STATUS:
        return policy.REFUND_STATUS
    if intent not in REQUESTS:
        return policy.NOT_REFUND
    return next((reason for reason, words in NAMED if words.search(text)), policy.OTHER_REQUEST)


def bitext(row: dict[str, str]) -> Mapped:
    text = row["instruction"].strip()
    number = row.get("entity_value", "").strip()
    orders = [number] if row.get("entity_type") == "order_id" and number and number in text else []
    return Mapped(text, orders, reading(row["intent"], text), "bitext", row["intent"])


def banking77(row: dict[str, str]) -> Mapped:
    text = row["text"].strip()
    return Mapped(text, [], reading(row["category"], text), "banking77", row["category"])


def mapped(folder: Path) -> Iterator[Mapped]:
    """Every row of both files, mapped, in file order; each text once (its first row)."""
    seen: set[str] = set()
    for name, mapper in ((BITEXT, bitext), (BANKING77, banking77)):
        with (folder / name).open(encoding="utf-8", newline="") as file:
            for row in csv.DictReader(file):
                out = mapper(row)
                key = " ".join(out.body.casefold().split())
                if out.body and key not in seen:
                    seen.add(key)
                    yield out


def write(folder: Path, output: Path) -> dict[str, int]:
    """train.jsonl and dev.jsonl in `output`; how many lines each holds."""
    output.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[str]] = {"train": [], "dev": []}
    for row in mapped(folder):
        parts[part_of(text_of("", row.body))].append(row.line())
    for part, lines in parts.items():
        (output / f"{part}.jsonl").write_text("".join(f"{line}\n" for line in lines), "utf-8")
    for licence in LICENCES:
        (output / licence).write_bytes((folder / licence).read_bytes())
    return {part: len(lines) for part, lines in parts.items()}
