"""The reader's trained classifier (intake/reader/trained.py, training.py) and `manage.py
train_reader`: it trains from labelled lines, writes a skops file that loads only with the trusted
types and refuses one that would build anything else, gives probabilities that sum to 1, reads
clear messages right, makes the same model from the same data, and says what is wrong with bad
input in a line, not a stack trace.

Trained here on a slice of the shipped data (every refund message, one in ten of the rest) to
keep the tests quick; the full data takes about 15 s."""

from __future__ import annotations

import json
import os
from io import StringIO
from pathlib import Path

import pytest
import skops.io
from django.core.management import CommandError, call_command
from sklearn.preprocessing import FunctionTransformer

from intake.reader import trained, training
from refunds import policy

DATA = Path(__file__).resolve().parent / "data"


def slice_of(part: str) -> str:
    lines = (DATA / "public" / f"{part}.jsonl").read_text(encoding="utf-8").splitlines()
    kept = [
        line
        for n, line in enumerate(lines)
        if json.loads(line)["reason"] != policy.NOT_REFUND or n % 10 == 0
    ]
    return "".join(f"{line}\n" for line in kept)


@pytest.fixture(scope="module")
def public(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("public")
    for part in ("train", "dev"):
        (folder / f"{part}.jsonl").write_text(slice_of(part), encoding="utf-8")
    return folder


def train(public: Path, output: Path, *extra: str) -> str:
    out = StringIO()
    call_command(
        "train_reader", "--public", str(public), "--output", str(output), *extra, stdout=out
    )
    return out.getvalue()


@pytest.fixture(scope="module")
def trained_file(public, tmp_path_factory) -> tuple[Path, str]:
    output = tmp_path_factory.mktemp("model") / "reader.skops"
    said = train(public, output, "--measure", str(DATA / "intake_eval_small.jsonl"))
    return output, said


def test_train_reader_writes_a_model_that_loads_with_the_trusted_types_only(trained_file):
    path, said = trained_file

    assert set(skops.io.get_untrusted_types(file=path)) <= set(trained.TRUSTED)
    classifier, seconds = trained.timed_load(path)
    assert seconds < 1.0 and path.stat().st_size < 20_000_000
    assert classifier.about["seed"] == training.SEED
    assert "development part: " in said and "macro-F1" in said
    assert "intake_eval_small.jsonl (measured only)" in said


def test_the_calibrated_probabilities_sum_to_1_and_are_the_models_own(trained_file):
    classifier = trained.load(trained_file[0])
    text = "Where is my refund? I returned the shoes two weeks ago."

    probabilities = classifier.probabilities(text)

    assert set(probabilities) == set(policy.REASONS)
    assert sum(probabilities.values()) == pytest.approx(1.0)
    (expected,) = classifier.model.predict_proba([text])
    by_class = dict(zip(classifier.model.classes_, expected, strict=True))
    assert probabilities == pytest.approx(by_class)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I want a refund for my purchase, please give me my money back", policy.OTHER_REQUEST),
        ("Where is my refund? It still hasn't shown up on my account", policy.REFUND_STATUS),
        ("How do I change my password?", policy.NOT_REFUND),
        ("Can I change the delivery address of my order?", policy.NOT_REFUND),
    ],
)
def test_it_reads_clear_messages_right(trained_file, text, reason):
    classifier = trained.load(trained_file[0])
    (first, sure), _ = classifier.top(text)
    assert first == reason, classifier.top(text)
    assert sure > 0.5


def test_the_same_data_and_seed_make_the_same_model(public, tmp_path, trained_file):
    again = tmp_path / "again.skops"
    train(public, again, "--measure", str(DATA / "intake_eval_small.jsonl"))
    first, second = trained.load(trained_file[0]), trained.load(again)
    for text in ("refund please", "where is my refund", "my card has not arrived"):
        # Equal but for the last bits a threaded BLAS may sum in another order.
        assert first.probabilities(text) == pytest.approx(second.probabilities(text), rel=1e-9)


def test_a_file_that_would_build_an_untrusted_type_is_refused(tmp_path):
    path = tmp_path / "evil.skops"
    skops.io.dump({"format": trained.FORMAT, "model": FunctionTransformer(os.system)}, path)

    with pytest.raises(trained.ModelUnusable, match="not trusted: posix.system"):
        trained.load(path)


def test_a_file_that_is_no_model_or_none_at_all_is_refused(tmp_path):
    (tmp_path / "text.skops").write_text("not a zip")
    with pytest.raises(trained.ModelUnusable, match="is not a reader model"):
        trained.load(tmp_path / "text.skops")
    with pytest.raises(trained.ModelUnusable, match="no such file .*train_reader"):
        trained.load(tmp_path / "missing.skops")


def test_a_model_made_by_another_scikit_learn_is_refused(trained_file, tmp_path):
    data = skops.io.load(trained_file[0], trusted=trained.TRUSTED)
    path = tmp_path / "old.skops"
    skops.io.dump({**data, "sklearn": "0.1"}, path)

    with pytest.raises(trained.ModelUnusable, match="made with scikit-learn 0.1"):
        trained.load(path)


def test_train_reader_says_a_data_file_is_missing_without_a_trace(tmp_path):
    with pytest.raises(CommandError, match=r"train\.jsonl: no such file") as raised:
        train(tmp_path / "nowhere", tmp_path / "reader.skops")
    assert raised.value.returncode == 2
    assert not (tmp_path / "reader.skops").exists()


def test_train_reader_names_a_bad_line(public, tmp_path):
    bad = tmp_path / "mine.jsonl"
    bad.write_text('{"body": "refund", "reason": "other"}\n{"body": "x", "reason": "angry"}\n')
    with pytest.raises(CommandError, match=r"mine\.jsonl, line 2: \"reason\" must be one of"):
        train(public, tmp_path / "reader.skops", "--with", str(bad))


def test_train_reader_refuses_a_path_it_cannot_write_before_training(public, tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CommandError, match="a-file is not a folder"):
        train(public, tmp_path / "a-file" / "reader.skops")


def test_the_classifier_reads_the_newest_words_not_the_quoted_reply():
    body = (
        "Thanks, got it!\n\nOn Mon, Refund Desk wrote:\n> Your refund for order 1042 is on its way"
    )
    assert trained.text_of("Re: refund", body) == "refund\nThanks, got it!"
