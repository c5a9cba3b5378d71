"""Measuring a reader against labelled messages (`manage.py eval_intake`): order-number
precision, recall and F1, reason accuracy, per reading (reason) precision, recall and F1 and
their mean (macro-F1), a confusion table, coverage against accuracy at the confidence threshold,
messages read per second.

A file holds one JSON object a line: {"sender": ..., "subject": ..., "body": ..., "orders":
["1042"], "reason": "late_delivery"}; sender and subject may be left out."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from intake.reading import REASON_SHORT as SHORT
from intake.reading import Reading, sureness
from refunds.policy import REASONS

Reader = Callable[..., Reading]
THRESHOLDS = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # the coverage table's columns


class BadFile(Exception):
    """The file cannot be measured; the message says where and why."""


@dataclass(frozen=True)
class Example:
    line: int
    sender: str
    subject: str
    body: str
    orders: tuple[str, ...]
    reason: str
    source: str  # the line's "source", or the file's name


@dataclass
class Score:
    """One reader's figures over one file."""

    messages: int = 0
    true_orders: int = 0  # orders read that the label has
    false_orders: int = 0  # orders read that the label lacks
    missed_orders: int = 0  # orders the label has and the reading lacks
    right_reasons: int = 0
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)  # (label, read) -> n
    fallbacks: Counter[str] = field(default_factory=Counter)  # why -> n
    seconds: float = 0.0
    misses: list[str] = field(default_factory=list)  # "line 12: reason late_delivery, read ..."
    threshold: float = 0.0  # readings less sure than this go to "Needs sorting"
    # Each message's (confidence, reason and orders both right), for coverage at any threshold.
    points: list[tuple[float, bool]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        read = self.true_orders + self.false_orders
        return self.true_orders / read if read else 1.0

    @property
    def recall(self) -> float:
        labelled = self.true_orders + self.missed_orders
        return self.true_orders / labelled if labelled else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def accuracy(self) -> float:
        return self.right_reasons / self.messages if self.messages else 0.0

    def per_reason(self, reason: str) -> tuple[float, float, float, int]:
        """(precision, recall, F1, how many are labelled so) of one reading."""
        labelled = sum(n for (label, _), n in self.confusion.items() if label == reason)
        read = sum(n for (_, got), n in self.confusion.items() if got == reason)
        right = self.confusion[(reason, reason)]
        precision = right / read if read else 0.0
        recall = right / labelled if labelled else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1, labelled

    @property
    def seen_reasons(self) -> list[str]:
        """The readings labelled or read in the file: those macro-F1 averages over."""
        seen = {r for pair in self.confusion for r in pair}
        return [r for r in REASONS if r in seen]

    @property
    def macro_f1(self) -> float:
        reasons = self.seen_reasons
        return sum(self.per_reason(r)[2] for r in reasons) / len(reasons) if reasons else 0.0

    def at(self, threshold: float) -> tuple[int, float, float]:
        """(how many are read at least this sure, their share: the coverage, and the share of
        those read right); the rest go to a person."""
        kept = [right for sure, right in self.points if sure >= threshold]
        coverage = len(kept) / self.messages if self.messages else 0.0
        return len(kept), coverage, (sum(kept) / len(kept) if kept else 0.0)

    @property
    def per_second(self) -> float:
        return self.messages / self.seconds if self.seconds else float("inf")


def load(path: Path) -> list[Example]:
    """Every example in the file, or BadFile naming the first bad line and why."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadFile(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise BadFile(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise BadFile(f"{path} cannot be read: {exc.strerror}") from None
    examples = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            examples.append(_example(path, number, line))
    if not examples:
        raise BadFile(f"{path} holds no messages")
    return examples


def _example(path: Path, number: int, line: str) -> Example:
    def bad(why: str) -> BadFile:
        return BadFile(f"{path}, line {number}: {why}")

    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise bad("not a JSON object")
    for key in ("sender", "subject", "body"):
        if not isinstance(data.get(key, ""), str):
            raise bad(f'"{key}" must be a string')
    if "body" not in data:
        raise bad('no "body"')
    orders = data.get("orders")
    if not isinstance(orders, list) or not all(isinstance(o, str) and o for o in orders):
        raise bad('"orders" must be a list of order numbers as strings ([] for none)')
    if data.get("reason") not in REASONS:
        raise bad(f'"reason" must be one of {", ".join(REASONS)}; got {data.get("reason")!r}')
    return Example(
        line=number,
        sender=data.get("sender", ""),
        subject=data.get("subject", ""),
        body=data["body"],
        orders=tuple(_norm(o) for o in orders),
        reason=data["reason"],
        source=str(data.get("source") or path.name),
    )


def curve(results: list[tuple[str, Score]], path: Path) -> None:
    """A PNG of each set's coverage against the share read right, one point per threshold."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(10, 5), dpi=100)
    steps = [i / 50 for i in range(50)]  # 0 to 0.98
    colours = pyplot.get_cmap("tab20")
    for i, (name, result) in enumerate(results):
        at = [result.at(t) for t in steps]
        axes.plot(
            [c for _, c, _ in at], [r for _, _, r in at], ".-", color=colours(i % 20), label=name
        )
    axes.set_xlabel("coverage (share read, not sent to Needs sorting)")
    axes.set_ylabel("share of those read right (reason and orders)")
    axes.set_title("The reader: coverage against accuracy, thresholds 0 to 0.98")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def _norm(order: str) -> str:
    """An order number as compared: no "#", case or leading zeros ("00123842" is 123842)."""
    return order.strip().lstrip("#").strip().upper().lstrip("0") or "0"


def score(examples: list[Example], reader: Reader, *, threshold: float = 0.0) -> Score:
    result = Score(threshold=threshold)
    started = time.perf_counter()
    for example in examples:
        reading = reader(sender=example.sender, subject=example.subject, body=example.body)
        read = {_norm(o) for o in reading.orders}
        labelled = set(example.orders)
        result.messages += 1
        result.true_orders += len(read & labelled)
        result.false_orders += len(read - labelled)
        result.missed_orders += len(labelled - read)
        result.right_reasons += reading.reason == example.reason
        result.confusion[(example.reason, reading.reason)] += 1
        result.points.append(
            (reading.confidence, read == labelled and reading.reason == example.reason)
        )
        if reading.fallback:
            result.fallbacks[reading.fallback] += 1
        if read != labelled or reading.reason != example.reason:
            result.misses.append(
                f"line {example.line}: labelled {example.reason} {sorted(labelled)}, "
                f"read {reading.reason} {sorted(read)}"
                + (f" (confidence {sureness(reading.confidence)})" * (reading.confidence < 1))
            )
    result.seconds = time.perf_counter() - started
    return result


def report(name: str, result: Score) -> list[str]:
    """The lines `eval_intake` prints for one reader."""
    lines = [
        f"{name}: {result.messages} messages, {result.per_second:,.0f} messages/s",
        f"  orders: precision {result.precision:.3f}  recall {result.recall:.3f}  "
        f"F1 {result.f1:.3f}  ({result.true_orders} right, {result.false_orders} wrong, "
        f"{result.missed_orders} missed)",
        f"  reason: accuracy {result.accuracy:.3f}  ({result.right_reasons} of {result.messages})",
    ]
    lines.append(
        f"  per reading: macro-F1 {result.macro_f1:.3f} over {len(result.seen_reasons)} readings"
    )
    for reason in result.seen_reasons:
        p, r, f1, n = result.per_reason(reason)
        lines.append(
            f"    {SHORT[reason]:<9} precision {p:.3f}  recall {r:.3f}  F1 {f1:.3f}  ({n} labelled)"
        )
    kept, coverage, right = result.at(result.threshold)
    lines.append(
        f"  confidence {sureness(result.threshold)} or more: {kept} of {result.messages} read "
        f"(coverage {coverage:.3f}), {result.messages - kept} to Needs sorting; "
        f"of those read, {right:.3f} right (reason and orders)"
    )
    lines.append("  confidence at least " + "".join(f"{sureness(t):>7}" for t in THRESHOLDS))
    at = [result.at(t) for t in THRESHOLDS]
    lines.append("  coverage           " + "".join(f"{c:>7.3f}" for _, c, _ in at))
    lines.append("  right of those     " + "".join(f"{r:>7.3f}" for _, _, r in at))
    if result.fallbacks:
        total = sum(result.fallbacks.values())
        lines.append(f"  fell back: {total} of {result.messages} messages")
        lines += [f"    {n} x {why}" for why, n in result.fallbacks.most_common()]
    lines.append("  confusion (rows: labelled, columns: read)")
    width = max(len(s) for s in SHORT.values()) + 1
    lines.append("    " + " " * width + "".join(f"{SHORT[r]:>{width}}" for r in REASONS))
    for label in result.seen_reasons:
        row = "".join(f"{result.confusion[(label, r)]:>{width}}" for r in REASONS)
        lines.append(f"    {SHORT[label]:<{width}}{row}")
    return lines


# --- labelled lines from what reviewers corrected (`manage.py export_corrections`) -------------
_ADDRESS = re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+")


class Masker:
    """Each email address as a stand-in, the same one for the same address throughout an export
    ("customer-1@example.invalid"), so a shop can share its set without its customers' addresses."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def address(self, address: str) -> str:
        key = address.strip().lower()
        if key not in self.seen:
            self.seen[key] = f"customer-{len(self.seen) + 1}@example.invalid"
        return self.seen[key]

    def text(self, text: str) -> str:
        return _ADDRESS.sub(lambda m: self.address(m.group()), text)


def labelled_line(
    *, sender: str, subject: str, body: str, orders: list[str], reason: str, **extra: object
) -> str:
    """One line of the format `load` reads; extra keys (what was read) are kept beside."""
    if reason not in REASONS:
        raise ValueError(f"unknown reason {reason!r}")
    data = {"sender": sender, "subject": subject, "body": body, "orders": orders, "reason": reason}
    return json.dumps({**data, **extra}, ensure_ascii=False)
