"""The reader's trained classifier: which reading a message is, with a calibrated probability for
each (intake/reader/training.py makes it; `manage.py train_reader` writes it to
REFUNDS_READER_FILE). Saved with skops, never a pickle: loading checks every type the file would
build against TRUSTED and refuses a file that names any other, so a model file swapped on disk
cannot run code of its own when a worker starts."""

from __future__ import annotations

import time
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from scipy import sparse

from intake.reader.text import clean_subject, split_own
from refunds.policy import REASONS

READINGS = tuple(REASONS)
FORMAT = 1  # the shape of what is saved: bump it when the saved dict changes
# What the classifier reads of a message: the subject and the newest words, at most this long.
MAX_CHARS = 4000

# Every type the saved classifier builds beyond what skops trusts by default (its
# get_untrusted_types for a file train_reader wrote). A file that needs any other is refused.
TRUSTED = [
    "sklearn.calibration._CalibratedClassifier",
    "sklearn.calibration._TemperatureScaling",
]


class ModelUnusable(Exception):
    """The model file cannot be used; the message says which file and why."""


@dataclass(frozen=True)
class Classifier:
    """A loaded classifier and what train_reader recorded of its making."""

    model: Any  # sklearn.calibration.CalibratedClassifierCV over a FrozenEstimator
    about: dict[str, Any] = field(default_factory=dict)

    def probabilities(self, text: str) -> dict[str, float]:
        """Each reading -> its calibrated probability (they sum to 1)."""
        # The model's own steps one after another: what predict_proba computes, without its
        # wrappers' checks, which took half the time of a message (600 a second, 1,200 so;
        # tests/test_reader_trained.py holds the two equal).
        branches, linear, temperature = self._steps
        features = sparse.hstack(
            [tfidf.transform(hashed.transform([text])) for hashed, tfidf in branches],
            format="csr",
        )
        row = temperature.predict(linear.decision_function(features))[0]
        return {str(c): float(p) for c, p in zip(linear.classes_, row, strict=True)}

    def top(self, text: str, n: int = 2) -> list[tuple[str, float]]:
        """The `n` likeliest readings, likeliest first."""
        ranked = sorted(self.probabilities(text).items(), key=lambda pair: -pair[1])
        return ranked[:n]

    @cached_property
    def _steps(self) -> tuple[list[tuple[Any, Any]], Any, Any]:
        (calibrated,) = self.model.calibrated_classifiers_
        pipeline = calibrated.estimator.estimator  # inside the FrozenEstimator
        branches = [
            (branch.named_steps["hashed"], branch.named_steps["tfidf"])
            for _, branch in pipeline.named_steps["features"].transformer_list
        ]
        (temperature,) = calibrated.calibrators
        return branches, pipeline.named_steps["linear"], temperature


def text_of(subject: str, body: str) -> str:
    """The subject and the customer's newest words (the quoted part when there are none)."""
    own, rest = split_own(body[: MAX_CHARS * 4])
    return f"{clean_subject(subject)}\n{own or rest}".strip()[:MAX_CHARS]


def save(model: Any, about: dict[str, Any], path: Path) -> int:
    """Write the classifier to `path` (through a file beside it, renamed once whole); its size."""
    import sklearn
    import skops.io

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    data = {"format": FORMAT, "sklearn": sklearn.__version__, "about": about, "model": model}
    # Deflated: most hashed columns are never seen, so most weights are zeros (17 MB -> 2.7 MB).
    skops.io.dump(data, partial, compression=zipfile.ZIP_DEFLATED)
    partial.replace(path)
    return path.stat().st_size


def load(path: Path) -> Classifier:
    """The classifier saved at `path`, or ModelUnusable: no such file, not a skops file, a type
    outside TRUSTED, or made by another scikit-learn."""
    import sklearn
    import skops.io

    try:
        untrusted = skops.io.get_untrusted_types(file=path)
    except FileNotFoundError:
        raise ModelUnusable(f"{path}: no such file (make it with manage.py train_reader)") from None
    except Exception as exc:  # a zip skops cannot read, or no zip at all
        raise ModelUnusable(f"{path} is not a reader model ({type(exc).__name__})") from None
    refused = sorted(set(untrusted) - set(TRUSTED))
    if refused:
        raise ModelUnusable(f"{path} would build types that are not trusted: {', '.join(refused)}")
    data = skops.io.load(path, trusted=TRUSTED)
    if not isinstance(data, dict) or data.get("format") != FORMAT or "model" not in data:
        raise ModelUnusable(f"{path} is not a reader model of format {FORMAT}")
    if data.get("sklearn") != sklearn.__version__:
        raise ModelUnusable(
            f"{path} was made with scikit-learn {data.get('sklearn')}, this is "
            f"{sklearn.__version__}: make it again with manage.py train_reader"
        )
    model = data["model"]
    if tuple(sorted(model.classes_)) != tuple(sorted(READINGS)):
        raise ModelUnusable(f"{path} reads {list(model.classes_)}, not the desk's readings")
    return Classifier(model=model, about=dict(data.get("about") or {}))


def timed_load(path: Path) -> tuple[Classifier, float]:
    """The classifier and the seconds its loading took."""
    started = time.perf_counter()
    classifier = load(path)
    return classifier, time.perf_counter() - started
