"""Training the reader's classifier (`manage.py train_reader`) and measuring it: labelled lines
in, a calibrated scikit-learn pipeline and its figures out. Nothing here runs while the intake
reads; intake/reader/trained.py loads what this made.

The data: `tests/data/public/` (train.jsonl, dev.jsonl: public customer-support messages mapped
to the desk's readings) and the project's own labelled lines, each split by `part_of` into a
training part and a development part by a hash of its text, so one message is always on the
same side, whatever file or order it comes in. The pipeline is fitted on the training part; its
probabilities are calibrated on the development part (temperature scaling, which keeps the
argmax, so calibration changes what the reader is sure of, never what it reads)."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import FeatureUnion, Pipeline

from intake.reader.trained import READINGS, Classifier, text_of
from intake.reading import REASON_SHORT as SHORT
from refunds.policy import REASONS

# DEV_PERCENT messages in every hundred go to the development part, chosen by their text's hash.
DEV_PERCENT = 20
SEED = 47
FEATURES = 2**17  # hashed n-grams of each kind
THRESHOLDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


class BadData(Exception):
    """A file the classifier cannot learn from; the message says which and why."""


@dataclass(frozen=True)
class Labelled:
    text: str  # what the classifier reads: text_of(subject, body)
    reason: str
    source: str  # the file's name, or "bitext"/"banking77" for the public rows


def part_of(text: str) -> str:
    """ "dev" or "train", by a hash of the text with case and spacing ignored: the same message
    lands on the same side every run and from every file, so the two parts never share one."""
    key = " ".join(text.casefold().split()).encode()
    return (
        "dev"
        if int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % 100 < DEV_PERCENT
        else "train"
    )


def load(path: Path) -> list[Labelled]:
    """Every labelled line of a JSON Lines file (eval_intake's format: "body", "reason", and
    "subject" if any; a line's "source" names where it came from), or BadData."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise BadData(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise BadData(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise BadData(f"{path} cannot be read: {exc.strerror}") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadData(f"{path}, line {number}: not JSON ({exc.msg})") from None
        if not isinstance(data, dict) or not isinstance(data.get("body"), str):
            raise BadData(f'{path}, line {number}: not a JSON object with a "body"')
        if data.get("reason") not in REASONS:
            raise BadData(
                f'{path}, line {number}: "reason" must be one of {", ".join(REASONS)}; '
                f"got {data.get('reason')!r}"
            )
        subject = data.get("subject") or ""
        source = data.get("source") or path.name
        rows.append(Labelled(text_of(str(subject), data["body"]), data["reason"], str(source)))
    if not rows:
        raise BadData(f"{path} holds no labelled lines")
    return rows


def split(rows: Iterable[Labelled]) -> tuple[list[Labelled], list[Labelled]]:
    """(training part, development part) by `part_of`."""
    train: list[Labelled] = []
    dev: list[Labelled] = []
    for row in rows:
        (dev if part_of(row.text) == "dev" else train).append(row)
    return train, dev


def pipeline(seed: int = SEED) -> Pipeline:
    """Word 1-2-grams and character 2-5-grams within words, TF-IDF weighted, into a linear
    model. The n-grams are hashed, not kept in a vocabulary: a vocabulary of tens of thousands
    of terms made a 54 MB skops file; hashed, the model is its arrays alone."""

    def tfidf(analyzer: str, ngrams: tuple[int, int]) -> Pipeline:
        hashed = HashingVectorizer(
            analyzer=analyzer,
            ngram_range=ngrams,
            strip_accents="unicode",
            n_features=FEATURES,
            alternate_sign=False,
            norm=None,
        )
        return Pipeline([("hashed", hashed), ("tfidf", TfidfTransformer(sublinear_tf=True))])

    features = FeatureUnion([("words", tfidf("word", (1, 2))), ("chars", tfidf("char_wb", (2, 5)))])
    linear = LogisticRegression(max_iter=3000, class_weight="balanced", random_state=seed)
    return Pipeline([("features", features), ("linear", linear)])


def fit(train: list[Labelled], dev: list[Labelled], *, seed: int = SEED) -> CalibratedClassifierCV:
    """The pipeline fitted on `train`, its probabilities calibrated on `dev`."""
    for name, rows in (("training", train), ("development", dev)):
        if missing := set(READINGS) - {r.reason for r in rows}:
            raise BadData(f"the {name} part has no message labelled {', '.join(sorted(missing))}")
    fitted = pipeline(seed).fit([r.text for r in train], [r.reason for r in train])
    # One fold holding every message: the frozen pipeline is never refitted, so the default
    # five folds only predicted the development part five times (and warned of readings with
    # fewer than five messages there).
    whole = [(np.arange(0), np.arange(len(dev)))]
    calibrated = CalibratedClassifierCV(FrozenEstimator(fitted), method="temperature", cv=whole)
    return calibrated.fit([r.text for r in dev], [r.reason for r in dev])


# --- measuring ----------------------------------------------------------------------------------
@dataclass
class Figures:
    """The classifier's reasons against the labels of one set of messages."""

    name: str
    labels: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)
    sure: list[float] = field(default_factory=list)  # the calibrated probability of what it read
    seconds: float = 0.0

    def per_reading(self, reason: str) -> tuple[float, float, float, int]:
        """(precision, recall, F1, how many are labelled so)."""
        pairs = list(zip(self.labels, self.read, strict=True))
        right = sum(1 for label, got in pairs if label == got == reason)
        read = sum(1 for _, got in pairs if got == reason)
        labelled = sum(1 for label, _ in pairs if label == reason)
        precision = right / read if read else 0.0
        recall = right / labelled if labelled else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1, labelled

    @property
    def seen(self) -> list[str]:
        """The readings labelled or read here: those macro-F1 averages over."""
        return [r for r in REASONS if r in set(self.labels) | set(self.read)]

    @property
    def macro_f1(self) -> float:
        seen = self.seen
        return sum(self.per_reading(r)[2] for r in seen) / len(seen) if seen else 0.0

    @property
    def accuracy(self) -> float:
        right = sum(1 for label, got in zip(self.labels, self.read, strict=True) if label == got)
        return right / len(self.labels) if self.labels else 0.0

    def at(self, threshold: float) -> tuple[float, float]:
        """(coverage, accuracy of what is kept) when readings below `threshold` go to a person."""
        kept = [
            (lab, got)
            for lab, got, p in zip(self.labels, self.read, self.sure, strict=True)
            if p >= threshold
        ]
        coverage = len(kept) / len(self.labels) if self.labels else 0.0
        right = sum(1 for label, got in kept if label == got)
        return coverage, (right / len(kept) if kept else 0.0)

    @property
    def per_second(self) -> float:
        return len(self.labels) / self.seconds if self.seconds else float("inf")


def measure(classifier: Classifier, rows: list[Labelled], name: str) -> Figures:
    """Read each message one at a time, as the intake does, and compare with its label."""
    figures = Figures(name)
    started = time.perf_counter()
    for row in rows:
        reason, sure = classifier.top(row.text)[0]
        figures.read.append(reason)
        figures.sure.append(sure)
    figures.seconds = time.perf_counter() - started
    figures.labels = [row.reason for row in rows]
    return figures


def report(figures: Figures) -> list[str]:
    lines = [
        f"{figures.name}: {len(figures.labels)} messages, {figures.per_second:,.0f} messages/s, "
        f"reason accuracy {figures.accuracy:.3f}, macro-F1 {figures.macro_f1:.3f} over "
        f"{len(figures.seen)} readings"
    ]
    for reason in figures.seen:
        p, r, f1, n = figures.per_reading(reason)
        lines.append(
            f"    {SHORT[reason]:<9} precision {p:.3f}  recall {r:.3f}  F1 {f1:.3f}  ({n} labelled)"
        )
    lines.append("    confidence at least " + "".join(f"{round(t * 100):>7}%" for t in THRESHOLDS))
    at = [figures.at(t) for t in THRESHOLDS]
    lines.append("    coverage            " + "".join(f"{c:>8.3f}" for c, _ in at))
    lines.append("    accuracy of those   " + "".join(f"{a:>8.3f}" for _, a in at))
    lines.append("    confusion (rows: labelled, columns: read)")
    lines.append("    " + " " * 10 + "".join(f"{SHORT[r]:>9}" for r in REASONS))
    pairs = Counter(zip(figures.labels, figures.read, strict=True))
    for label in figures.seen:
        lines.append(
            f"    {SHORT[label]:<10}" + "".join(f"{pairs[(label, r)]:>9}" for r in REASONS)
        )
    return lines


def counted(rows: list[Labelled]) -> str:
    """ "12,648 messages (bitext 2,528, banking77 8,004, ...)"."""
    by_source = Counter(r.source for r in rows)
    return (
        f"{len(rows):,} messages ("
        + ", ".join(f"{s} {n:,}" for s, n in sorted(by_source.items()))
        + ")"
    )
