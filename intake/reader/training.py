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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import FeatureUnion, Pipeline

from intake.reader.trained import BRANCHES, READINGS, Classifier, text_of
from refunds.policy import REASONS

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
PUBLIC = DATA / "public"  # train.jsonl and dev.jsonl, split already
# The project's own labelled sets: the desk's reasons, which the public data hardly holds.
OWN = tuple(
    DATA / name
    for name in (
        "desk_a.jsonl", "desk_b.jsonl", "desk_c.jsonl", "desk_d.jsonl", "desk_e.jsonl",
        "desk_f.jsonl", "desk_g.jsonl", "desk_h.jsonl", "desk_i.jsonl", "desk_j.jsonl",
        "intake_eval.jsonl", "intake_misses.jsonl", "intake_status.jsonl",
    )
)  # fmt: skip
# DEV_PERCENT messages in every hundred go to the development part, chosen by their text's hash.
DEV_PERCENT = 20
SEED = 47
FEATURES = 2**17  # hashed n-grams of each kind


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
    of terms made a 54 MB file; hashed, the model is its arrays alone."""

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

    features = FeatureUnion(
        [
            (name, tfidf(analyzer, ngrams))
            for name, (analyzer, ngrams) in zip(("words", "chars"), BRANCHES, strict=True)
        ]
    )
    linear = LogisticRegression(C=20.0, max_iter=3000, class_weight="balanced", random_state=seed)
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


def exported(model: CalibratedClassifierCV, about: dict[str, object]) -> Classifier:
    """What the reader reads with, out of the fitted pipeline: per branch its idf and weights,
    the intercept, the temperature's factor (intake/reader/trained.py computes the rest)."""
    (calibrated,) = model.calibrated_classifiers_
    pipeline = calibrated.estimator.estimator  # inside the FrozenEstimator
    linear = pipeline.named_steps["linear"]
    branches, offset = [], 0
    for _, branch in pipeline.named_steps["features"].transformer_list:
        size = branch.named_steps["hashed"].n_features
        weights = np.ascontiguousarray(linear.coef_[:, offset : offset + size].T)
        branches.append((branch.named_steps["tfidf"].idf_, weights))
        offset += size
    (temperature,) = calibrated.calibrators
    classes = tuple(str(c) for c in linear.classes_)
    return Classifier(classes, linear.intercept_, tuple(branches), float(temperature.beta_), about)


def fingerprint(paths: list[Path]) -> str:
    """A hash of the files a model learns from: a model shipped beside other data is stale."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def counted(rows: list[Labelled]) -> str:
    """ "12,648 messages (bitext 2,528, banking77 8,004, ...)"."""
    by_source = Counter(r.source for r in rows)
    return (
        f"{len(rows):,} messages ("
        + ", ".join(f"{s} {n:,}" for s, n in sorted(by_source.items()))
        + ")"
    )
