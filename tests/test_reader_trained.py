"""The reader's trained classifier (intake/reader/trained.py, training.py) and `manage.py
train_reader`: it trains from labelled lines, writes a file of numpy arrays that loads without
pickle and refuses one that holds anything else, gives probabilities that sum to 1 and equal the
fitted scikit-learn model's, reads clear messages right, makes the same model from the same data,
and says what is wrong with bad input in a line, not a stack trace.

Trained here on the project's own sets and a slice of the public data (every refund message, one
in ten of the rest) to keep the tests quick; the full data takes about 25 s."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

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
    output = tmp_path_factory.mktemp("model") / "reader.npz"
    said = train(public, output)
    return output, said


def test_train_reader_writes_a_model_of_numbers_that_loads_in_a_blink(trained_file):
    path, said = trained_file

    with np.load(path, allow_pickle=False) as saved:  # nothing in it needs a pickle
        assert all(saved[name].dtype != object for name in saved.files)
    classifier, seconds = trained.timed_load(path)
    assert seconds < 1.0 and path.stat().st_size < 20_000_000
    assert classifier.about["seed"] == training.SEED
    assert "development part: " in said
    assert "the classifier alone on the development part:" in said and "desk_a.jsonl: " in said


def test_the_calibrated_probabilities_sum_to_1_and_are_the_fitted_models_own(public):
    """The n-grams, their hashes, the TF-IDF weights and the temperature computed here are
    scikit-learn's: the saved arrays read in numpy give what the fitted model gives."""
    train, dev = training.split(training.load(DATA / "desk_a.jsonl"))
    train += training.load(public / "train.jsonl")
    dev += training.load(public / "dev.jsonl")
    model = training.fit(train, dev)
    classifier = training.exported(model, {})
    texts = [
        "Where is my refund? I returned the shoes two weeks ago.",
        "Mi pedido llegó roto, ¿me devuelven el dinero? Pedido nº 1042",
        "ÇA N'EST PAS ARRIVÉ   du tout !!  #1042 — déçue",
        "ok",
        "",
        *(row.text for row in dev[:40]),
    ]

    for text, expected in zip(texts, model.predict_proba(texts), strict=True):
        probabilities = classifier.probabilities(text)
        assert sum(probabilities.values()) == pytest.approx(1.0)
        by_class = dict(zip(model.classes_, expected, strict=True))
        assert probabilities == pytest.approx(by_class, rel=1e-9, abs=1e-12), text


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
    (first, sure), *_ = classifier.ranked(text)
    assert first == reason, classifier.ranked(text)
    assert sure > 0.5


def test_the_same_data_and_seed_make_the_same_model(public, tmp_path, trained_file):
    again = tmp_path / "again.npz"
    train(public, again)
    first, second = trained.load(trained_file[0]), trained.load(again)
    for text in ("refund please", "where is my refund", "my card has not arrived"):
        # Equal but for the last bits a threaded BLAS may sum in another order.
        assert first.probabilities(text) == pytest.approx(second.probabilities(text), rel=1e-9)


def test_the_shipped_model_was_trained_from_the_shipped_data():
    """A change to the data, the own sets or the seed without `manage.py train_reader` after it
    leaves the shipped model stale: this says so."""
    shipped = trained.load(Path(settings.REFUNDS_READER_FILE))
    files = [training.PUBLIC / "train.jsonl", training.PUBLIC / "dev.jsonl", *training.OWN]

    assert shipped.about["data"] == training.fingerprint(files), "run manage.py train_reader"
    assert shipped.about["seed"] == training.SEED


def test_the_sentence_that_says_a_reason_most_is_the_one_quoted(trained_file):
    classifier = trained.load(trained_file[0])
    said = ["Hello there.", "The vase arrived smashed to pieces.", "Regards, Ana"]

    assert classifier.telling(said, policy.DAMAGED) == 1


def test_a_file_holding_a_pickle_is_refused_unread(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, meta=np.array([{"format": trained.FORMAT}], dtype=object))

    with pytest.raises(
        trained.ModelUnusable, match=r"evil\.npz is not a reader model \(ValueError\)"
    ):
        trained.load(path)


def test_a_file_that_is_no_model_or_none_at_all_is_refused(tmp_path):
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(trained.ModelUnusable, match="is not a reader model"):
        trained.load(tmp_path / "text.npz")
    with pytest.raises(trained.ModelUnusable, match="no such file .*train_reader"):
        trained.load(tmp_path / "missing.npz")


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"format": 1}, "is not a reader model of format 2"),
        ({"branches": [["word", [1, 3]], ["char_wb", [2, 5]]]}, "reads n-grams"),
        ({"classes": ["late_delivery", "other"]}, "not the desk's readings"),
    ],
)
def test_a_model_of_another_format_analyzer_or_readings_is_refused(
    trained_file, tmp_path, change, refused
):
    with np.load(trained_file[0], allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    meta = json.loads(str(arrays["meta"]))
    path = tmp_path / "other.npz"
    np.savez(path, **{**arrays, "meta": np.array(json.dumps({**meta, **change}))})

    with pytest.raises(trained.ModelUnusable, match=refused):
        trained.load(path)


def test_train_reader_says_a_data_file_is_missing_without_a_trace(tmp_path):
    with pytest.raises(CommandError, match=r"train\.jsonl: no such file") as raised:
        train(tmp_path / "nowhere", tmp_path / "reader.npz")
    assert raised.value.returncode == 2
    assert not (tmp_path / "reader.npz").exists()


def test_train_reader_names_a_bad_line(public, tmp_path):
    bad = tmp_path / "mine.jsonl"
    bad.write_text('{"body": "refund", "reason": "other"}\n{"body": "x", "reason": "angry"}\n')
    with pytest.raises(CommandError, match=r"mine\.jsonl, line 2: \"reason\" must be one of"):
        train(public, tmp_path / "reader.npz", "--with", str(bad))


def test_train_reader_refuses_a_path_it_cannot_write_before_training(public, tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CommandError, match="a-file is not a folder"):
        train(public, tmp_path / "a-file" / "reader.npz")


def test_the_classifier_reads_the_newest_words_not_the_quoted_reply():
    body = (
        "Thanks, got it!\n\nOn Mon, Refund Desk wrote:\n> Your refund for order 1042 is on its way"
    )
    assert trained.text_of("Re: refund", body) == "refund\nThanks, got it!"


def test_a_process_with_an_unusable_reader_file_stops_at_its_start_saying_why(tmp_path):
    from tests.test_settings import manage_check

    (tmp_path / "text.npz").write_text("not a zip")
    result = manage_check(tmp_path, REFUNDS_READER_FILE=str(tmp_path / "text.npz"))

    assert result.returncode != 0
    assert "intake.E001" in result.stderr and "text.npz is not a reader model" in result.stderr
