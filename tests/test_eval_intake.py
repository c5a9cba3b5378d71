"""`manage.py eval_intake` measures the reader on labelled messages: the exact figures of a
reader (orders precision, recall, F1; reason accuracy; per reading precision, recall and F1 and
macro-F1; coverage against accuracy at the threshold and at each step; the confusion table), per
file and source, with a PNG curve; a model that cannot be used is reported with its fallbacks,
not a crash; a bad file is refused with the line it is bad at. The trained reader keeps its
floors on the development part of every shipped set."""

from __future__ import annotations

import json
from functools import partial
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from devtools import evaluation
from intake.reader import model
from intake.reading import Reading

DATA = Path(__file__).resolve().parent / "data"
SMALL = DATA / "intake_eval_small.jsonl"


def run(*args: str) -> list[str]:
    out = StringIO()
    call_command("eval_intake", *args, stdout=out)
    return out.getvalue().splitlines()


def test_it_prints_the_exact_figures_of_a_reader_on_a_small_file():
    examples = evaluation.load(SMALL)
    lines = evaluation.report("x", evaluation.score(examples, _reading_of(0.45), threshold=0.5))

    assert lines[0].startswith("x: 6 messages, ") and lines[0].endswith(" messages/s")
    assert lines[1:] == [
        "  orders: precision 0.833  recall 0.833  F1 0.833  (5 right, 1 wrong, 1 missed)",
        "  reason: accuracy 0.833  (5 of 6)",
        "  per reading: macro-F1 0.667 over 6 readings",
        "    late      precision 1.000  recall 1.000  F1 1.000  (2 labelled)",
        "    damaged   precision 1.000  recall 1.000  F1 1.000  (1 labelled)",
        "    not_recv  precision 1.000  recall 1.000  F1 1.000  (1 labelled)",
        "    wrong     precision 0.000  recall 0.000  F1 0.000  (1 labelled)",
        "    other     precision 0.000  recall 0.000  F1 0.000  (0 labelled)",
        "    not_ref   precision 1.000  recall 1.000  F1 1.000  (1 labelled)",
        "  confidence 50% or more: 0 of 6 read (coverage 0.000), 6 to Needs sorting; of those "
        "read, 0.000 right (reason and orders)",
        "  confidence at least      0%    30%    40%    50%    60%    70%    80%    90%    95%",
        "  coverage             1.000  1.000  1.000  0.000  0.000  0.000  0.000  0.000  0.000",
        "  right of those       0.833  0.833  0.833  0.000  0.000  0.000  0.000  0.000  0.000",
        "  confusion (rows: labelled, columns: read)",
        "                  late  damaged not_recv    wrong    other  not_ref   status",
        "    late             2        0        0        0        0        0        0",
        "    damaged          0        1        0        0        0        0        0",
        "    not_recv         0        0        1        0        0        0        0",
        "    wrong            0        0        0        0        1        0        0",
        "    other            0        0        0        0        0        0        0",
        "    not_ref          0        0        0        0        0        1        0",
    ]


def test_the_command_measures_each_file_and_draws_the_curve(tmp_path):
    curve = tmp_path / "curve.png"
    lines = run(str(SMALL), "--misses", "--curve", str(curve))

    assert lines[1].startswith("classifier on intake_eval_small.jsonl: 6 messages, ")
    assert any(line.startswith("  coverage    ") for line in lines)
    assert lines[-1] == f"coverage against accuracy: {curve}"
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_model_that_cannot_be_used_is_reported_with_its_fallbacks_not_a_crash():
    lines = run(str(SMALL), "--model", "openai:gpt-4.1-mini")

    at = lines.index(
        "openai:gpt-4.1-mini on intake_eval_small.jsonl: read no message; every one fell back"
    )
    assert lines[at + 1] == (
        "  fell back: 6 of 6: the model openai:gpt-4.1-mini cannot be used here: its "
        "package langchain-openai is not installed; read by classifier"
    )
    assert lines[1].startswith("classifier on intake_eval_small.jsonl: 6 messages")


def test_the_configured_model_is_measured_beside_the_rules(settings):
    settings.REFUNDS_MODEL = "ollama:llama3"
    lines = run(str(SMALL))
    assert "ollama:llama3 on intake_eval_small.jsonl: read no message; every one fell back" in lines


def test_a_model_that_reads_some_messages_is_scored_with_its_fallback_count():
    examples = evaluation.load(SMALL)
    good = {
        "reason": "late_delivery",
        "orders": ["1042"],
        "amount_cents": None,
        "language": "en",
        "summary": "late",
        "quotes": {},
    }
    answers = [json.dumps(good)] + ["not json"] * 5
    chat = GenericFakeChatModel(messages=iter(AIMessage(content=a) for a in answers))
    reader = partial(model.read_with, chat, spec="fake:x", timeout=5, attempts=1)

    result = evaluation.score(examples, reader)

    assert result.fallbacks == {"the model's answer was not valid JSON; read by classifier": 5}
    lines = evaluation.report("fake:x", result)
    assert "  fell back: 5 of 6 messages" in lines


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"body": "x", "orders": [], "reason": "other"}\nnot json\n', "line 2: not JSON"),
        ('{"body": "x", "orders": [], "reason": "other"}\n[1, 2]\n', "line 2: not a JSON object"),
        (
            '\n\n{"body": "x", "orders": [], "reason": "angry"}\n',
            'line 3: "reason" must be one of late_delivery, damaged, not_received, wrong_item, '
            "other, not_refund, refund_status; got 'angry'",
        ),
        ('{"body": "x", "orders": [1042], "reason": "other"}', 'line 1: "orders" must be a list'),
        ('{"orders": [], "reason": "other"}', 'line 1: no "body"'),
        ('{"body": 3, "orders": [], "reason": "other"}', 'line 1: "body" must be a string'),
    ],
)
def test_a_bad_line_is_refused_with_its_number_and_why(tmp_path, content, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        run(str(bad))
    assert str(refused.value).startswith(f"{bad}, {message}")
    assert refused.value.returncode == 2


def test_a_missing_file_is_refused_in_one_sentence(tmp_path):
    with pytest.raises(CommandError, match=r"no-such\.jsonl: no such file$"):
        run(str(tmp_path / "no-such.jsonl"))


def test_an_empty_or_binary_file_is_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(CommandError, match="holds no messages"):
        run(str(empty))
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(CommandError, match="is not UTF-8 text"):
        run(str(binary))


def test_a_malformed_model_spec_is_refused(tmp_path):
    with pytest.raises(CommandError, match="--model must be provider:model"):
        run(str(SMALL), "--model", "gpt4")


# The trained reader on the development part of each shipped set, measured when the shipped model
# was trained (issue 47; `manage.py eval_intake` prints them): CI fails when a change drops one by
# more than MARGIN. Raise a floor with the reader.
MARGIN = 0.02
# name: (macro-F1, order-number F1, coverage at the threshold, right of those read)
FLOORS: dict[str, tuple[float, float, float, float]] = {
    "dev.jsonl": (0.918, 0.782, 0.998, 0.987),
    "desk_a.jsonl": (0.900, 0.968, 0.940, 0.841),
    "desk_b.jsonl": (0.868, 0.989, 0.873, 0.896),
    "desk_c.jsonl": (0.879, 0.986, 0.955, 0.905),
    "desk_d.jsonl": (0.884, 1.000, 0.974, 0.946),
    "desk_e.jsonl": (0.740, 0.983, 0.902, 0.761),
    "desk_f.jsonl": (0.650, 1.000, 0.881, 0.838),
    "desk_g.jsonl": (0.845, 0.971, 0.944, 0.853),
    "desk_h.jsonl": (0.863, 0.988, 0.912, 0.877),
    "desk_i.jsonl": (0.884, 0.986, 0.905, 0.896),
    "desk_j.jsonl": (0.910, 1.000, 0.900, 0.952),
    "intake_eval.jsonl": (0.961, 1.000, 0.947, 1.000),
    "intake_misses.jsonl": (0.828, 1.000, 0.941, 0.875),
    "intake_status.jsonl": (0.694, 1.000, 0.917, 0.818),
}


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_the_trained_reader_stays_within_its_margin_of_each_sets_floors(name):
    from intake.reader import default, training
    from intake.reader.trained import text_of

    path = training.PUBLIC / name if name == "dev.jsonl" else DATA / name
    examples = [
        e for e in evaluation.load(path)
        if name == "dev.jsonl" or training.part_of(text_of(e.subject, e.body)) == "dev"
    ]  # fmt: skip
    result = evaluation.score(examples, default.read, threshold=0.5)
    _, coverage, right = result.at(0.5)
    figures = (result.macro_f1, result.f1, coverage, right)
    assert all(got >= floor - MARGIN for got, floor in zip(figures, FLOORS[name], strict=True)), (
        figures,
        result.misses,
    )


def test_coverage_counts_what_goes_to_sorting_below_the_threshold():
    examples = evaluation.load(SMALL)
    sure = evaluation.score(examples, _reading_of(0.9), threshold=0.5)
    unsure = evaluation.score(examples, _reading_of(0.4), threshold=0.5)
    assert sure.at(0.5)[:2] == (6, 1.0)
    assert unsure.at(0.5) == (0, 0.0, 0.0)
    assert "0 of 6 read (coverage 0.000), 6 to Needs sorting" in "".join(
        evaluation.report("x", unsure)
    )


def test_a_bad_threshold_is_refused():
    with pytest.raises(CommandError, match="--min-confidence must be between 0 and 1"):
        run(str(SMALL), "--min-confidence", "2")


def _reading_of(confidence: float):
    """A reader that reads SMALL's labels, but for its last line (read as another request, of
    order 1051), all at `confidence`."""
    labels = {e.body: e for e in evaluation.load(SMALL)}

    def reader(*, sender: str, subject: str, body: str) -> Reading:
        example = labels[body]
        wrong = example.line == 6
        return Reading(
            reason="other" if wrong else example.reason,
            orders=["1051"] if wrong else list(example.orders),
            amount_cents=None,
            language="en",
            summary="",
            confidence=confidence,
        )

    return reader


def test_the_status_set_labels_where_is_my_refund_in_six_languages_beside_near_misses():
    lines = [json.loads(line) for line in (DATA / "intake_status.jsonl").read_text().splitlines()]
    asking = [line for line in lines if line["reason"] == "refund_status"]
    assert len(asking) >= 20
    assert {line["language"] for line in asking} == {"en", "es", "de", "fr", "pt", "it"}
    near = [line for line in lines if line["reason"] != "refund_status"]
    assert len(near) >= 15 and all(
        "refund" in line["body"].lower() or line["language"] != "en" for line in near
    )
