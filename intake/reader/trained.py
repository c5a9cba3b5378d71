"""The reader's trained classifier: which reading a message is, with a calibrated probability for
each (intake/reader/training.py makes it with scikit-learn; `manage.py train_reader` writes it to
REFUNDS_READER_FILE).

Saved in a format of its own: numpy arrays (the weights, the idf of each n-gram column, the
temperature) and what they were made with, in one .npz file read with `allow_pickle=False`, so a
file swapped on disk can hold numbers and nothing that runs. Reading a message needs numpy and
mmh3 only: the n-grams are made and hashed here as scikit-learn's HashingVectorizer makes and
hashes them (tests/test_reader_trained.py holds the probabilities equal to the fitted model's),
and a worker loads the file in milliseconds instead of importing scikit-learn (2 to 3 s)."""

from __future__ import annotations

import json
import re
import time
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mmh3
import numpy as np

from intake.reader.text import clean_subject, split_own
from refunds.policy import REASONS

READINGS = tuple(REASONS)
FORMAT = 2  # the shape of what is saved: bump it when the arrays or the analyzers change
# What the classifier reads of a message: the subject and the newest words, at most this long.
MAX_CHARS = 4000
# The branches this module reads, as training.pipeline() makes them: (analyzer, n-gram range).
BRANCHES = (("word", (1, 2)), ("char_wb", (2, 5)))
_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # HashingVectorizer's token_pattern
_WHITE_SPACES = re.compile(r"\s\s+")


class ModelUnusable(Exception):
    """The model file cannot be used; the message says which file and why."""


@dataclass(frozen=True)
class Classifier:
    """A loaded classifier and what train_reader recorded of its making."""

    classes: tuple[str, ...]
    intercept: Any  # (readings,)
    branches: tuple[
        tuple[Any, Any], ...
    ]  # per BRANCHES: (idf (columns,), weights (columns, readings))
    beta: float  # the temperature's factor
    about: dict[str, Any] = field(default_factory=dict)

    def probabilities(self, text: str) -> dict[str, float]:
        """Each reading -> its calibrated probability (they sum to 1)."""
        scores = self.intercept.copy()
        for (analyzer, _), (idf, weights) in zip(BRANCHES, self.branches, strict=True):
            columns, values = _tfidf(_ngrams(text, analyzer), idf)
            scores += weights[columns].T @ values
        logits = self.beta * (scores - scores.max())  # the temperature's softmax
        row = np.exp(logits) / np.exp(logits).sum()
        return {c: float(p) for c, p in zip(self.classes, row, strict=True)}

    def ranked(self, text: str) -> list[tuple[str, float]]:
        """Every reading with its probability, likeliest first."""
        return sorted(self.probabilities(text).items(), key=lambda pair: -pair[1])

    def telling(self, sentences: list[str], reason: str) -> int:
        """Which of `sentences` says `reason` most, by the weights its word n-grams give it."""
        idf, weights = self.branches[0]  # the words' branch
        column = weights[:, self.classes.index(reason)]
        said = []
        for sentence in sentences:
            columns, values = _tfidf(_ngrams(sentence, "word"), idf)
            said.append(float(column[columns] @ values))
        return int(np.argmax(said))


def _ngrams(text: str, analyzer: str) -> list[str]:
    """The n-grams of `text` as HashingVectorizer(analyzer, ngram_range of BRANCHES,
    strip_accents="unicode") makes them: lower case, accents stripped, then word 1-2-grams or
    character 2-5-grams within words padded by a space."""
    text = text.lower()
    if not text.isascii():
        text = "".join(
            c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
        )
    if analyzer == "word":
        words = _TOKEN.findall(text)
        return words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
    grams: list[str] = []
    for word in _WHITE_SPACES.sub(" ", text).split():
        word = f" {word} "
        for n in range(2, 6):
            grams += [word[i : i + n] for i in range(max(1, len(word) - n + 1))]
            if len(word) <= n:  # a short word is counted once, whole
                break
    return grams


def _tfidf(grams: list[str], idf: Any) -> tuple[Any, Any]:
    """(columns, values): the n-grams hashed as FeatureHasher hashes them (MurmurHash3, seed 0,
    the absolute value modulo the columns), counted, then as TfidfTransformer(sublinear_tf=True)
    weighs them: 1 + log of the count, times the idf, of length 1."""
    size = len(idf)
    hashes = np.fromiter((mmh3.hash(g, 0) for g in grams), dtype=np.int64, count=len(grams))
    columns, counts = np.unique(np.abs(hashes) % size, return_counts=True)
    values = (np.log(counts) + 1.0) * idf[columns]
    length = np.sqrt(values @ values)
    return columns, (values / length if length else values)


def text_of(subject: str, body: str) -> str:
    """The subject and the customer's newest words (the quoted part when there are none)."""
    return joined(clean_subject(subject), *split_own(body[: MAX_CHARS * 4]))


def joined(subject: str, own: str, rest: str) -> str:
    """What the classifier reads of a message already split (intake/reader/text.py)."""
    return f"{subject}\n{own or rest}".strip()[:MAX_CHARS]


def save(classifier: Classifier, path: Path) -> int:
    """Write the classifier to `path` (through a file beside it, renamed once whole); its size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    meta = {"format": FORMAT, "branches": BRANCHES, "classes": classifier.classes}
    arrays = {f"idf{i}": idf for i, (idf, _) in enumerate(classifier.branches)}
    arrays |= {f"weights{i}": w for i, (_, w) in enumerate(classifier.branches)}
    with partial.open("wb") as out:
        # Compressed: most hashed columns are never seen, so most weights are zeros.
        np.savez_compressed(
            out,
            meta=np.array(json.dumps({**meta, "about": classifier.about})),
            intercept=classifier.intercept,
            beta=np.array(classifier.beta),
            **arrays,
        )
    partial.replace(path)
    return path.stat().st_size


def load(path: Path) -> Classifier:
    """The classifier saved at `path`, or ModelUnusable: no such file, not a reader model (or one
    holding anything but numbers and text), another format, other readings or analyzers."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {name: saved[name] for name in saved.files}
        meta = json.loads(str(arrays.pop("meta")))
        branches = tuple(
            (arrays[f"idf{i}"].astype(np.float64), arrays[f"weights{i}"].astype(np.float64))
            for i in range(len(BRANCHES))
        )
        intercept, beta = arrays["intercept"].astype(np.float64), float(arrays["beta"])
    except FileNotFoundError:
        raise ModelUnusable(f"{path}: no such file (make it with manage.py train_reader)") from None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        # ValueError: an object array, which only a pickle could build, is refused unread.
        raise ModelUnusable(f"{path} is not a reader model ({type(exc).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelUnusable(f"{path} is not a reader model of format {FORMAT}")
    if [[a, list(n)] for a, n in BRANCHES] != meta.get("branches"):
        raise ModelUnusable(f"{path} reads n-grams {meta.get('branches')}, not {BRANCHES}")
    classes = tuple(meta.get("classes") or ())
    if sorted(classes) != sorted(READINGS):
        raise ModelUnusable(f"{path} reads {list(classes)}, not the desk's readings")
    if intercept.shape != (len(classes),) or any(
        w.shape != (len(idf), len(classes)) for idf, w in branches
    ):
        raise ModelUnusable(f"{path} holds arrays of the wrong shapes")
    return Classifier(classes, intercept, branches, beta, dict(meta.get("about") or {}))


def timed_load(path: Path) -> tuple[Classifier, float]:
    """The classifier and the seconds its loading took."""
    started = time.perf_counter()
    classifier = load(path)
    return classifier, time.perf_counter() - started
