"""`manage.py eval_intake` measures the reader on labelled messages: on a small fixture it prints
the exact figures (orders precision, recall, F1; reason accuracy; per reading precision, recall
and F1 and macro-F1; coverage against accuracy at the confidence threshold; the confusion
table); a model
that cannot be used is reported with its fallbacks, not a crash; a bad file is refused with the
line it is bad at. The shipped set keeps the rules reader at its targets."""

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

DATA = Path(__file__).resolve().parent / "data"
SMALL = DATA / "intake_eval_small.jsonl"


def run(*args: str) -> list[str]:
    out = StringIO()
    call_command("eval_intake", *args, stdout=out)
    return out.getvalue().splitlines()


def test_it_prints_the_exact_figures_for_the_rules_on_a_small_file():
    lines = run(str(SMALL), "--misses")

    assert lines[0] == f"{SMALL}: 6 messages"
    assert lines[2].startswith("rules: 6 messages, ") and lines[2].endswith(" messages/s")
    assert lines[3:] == [
        "  orders: precision 0.833  recall 0.833  F1 0.833  (5 right, 1 wrong, 1 missed)",
        "  reason: accuracy 0.833  (5 of 6)",
        "  per reading: macro-F1 0.667 over 6 readings",
        "    late      precision 1.000  recall 1.000  F1 1.000  (2 labelled)",
        "    damaged   precision 1.000  recall 1.000  F1 1.000  (1 labelled)",
        "    not_recv  precision 1.000  recall 1.000  F1 1.000  (1 labelled)",
        "    wrong     precision 0.000  recall 0.000  F1 0.000  (1 labelled)",
        "    other     precision 0.000  recall 0.000  F1 0.000  (0 labelled)",
        "    not_ref   precision 1.000  recall 1.000  F1 1.000  (1 labelled)",
        "  confidence 50% or more: 6 of 6 read (coverage 1.000), 0 to Needs sorting; of those "
        "read, 0.833 right (reason and orders)",
        "  confusion (rows: labelled, columns: read)",
        "                  late  damaged not_recv    wrong    other  not_ref   status",
        "    late             2        0        0        0        0        0        0",
        "    damaged          0        1        0        0        0        0        0",
        "    not_recv         0        0        1        0        0        0        0",
        "    wrong            0        0        0        0        1        0        0",
        "    other            0        0        0        0        0        0        0",
        "    not_ref          0        0        0        0        0        1        0",
        "    status           0        0        0        0        0        0        0",
        "  line 6: labelled wrong_item ['1050'], read other ['1051']",
    ]


def test_a_model_that_cannot_be_used_is_reported_with_its_fallbacks_not_a_crash():
    lines = run(str(SMALL), "--model", "openai:gpt-4.1-mini")

    at = lines.index("openai:gpt-4.1-mini: read no message; all 6 were read by the rules")
    assert lines[at + 1] == (
        "  fell back to rules: 6 of 6: the model openai:gpt-4.1-mini cannot be used here: its "
        "package langchain-openai is not installed; read by rules"
    )
    assert lines[2].startswith("rules: 6 messages")  # the rules are still measured


def test_the_configured_model_is_measured_beside_the_rules(settings):
    settings.REFUNDS_MODEL = "ollama:llama3"
    lines = run(str(SMALL))
    assert "ollama:llama3: read no message; all 6 were read by the rules" in lines


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

    assert result.fallbacks == {"the model's answer was not valid JSON; read by rules": 5}
    assert (result.true_orders, result.false_orders, result.missed_orders) == (5, 1, 1)
    lines = evaluation.report("fake:x", result)
    assert "  fell back to rules: 5 of 6 messages" in lines


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


def test_the_shipped_set_has_80_messages_or_more_and_keeps_the_rules_at_their_targets():
    lines = run()
    assert lines[0].endswith("intake_eval.jsonl: 90 messages")
    examples = evaluation.load(DATA / "intake_eval.jsonl")
    from intake.reader import rules

    result = evaluation.score(examples, rules.read)
    assert result.f1 >= 0.95, result.misses
    assert result.accuracy >= 0.85, result.misses


# Macro-F1 of the rules on the shipped sets, measured when this test was written (issue 33; the
# own set 0.874 before "later than promised", a disputed delivery, "someone else's order" and
# thanks for a refund were read in general terms, 0.982 after): CI
# fails when a change drops it by more than MARGIN below its floor. Raise a floor with the reader.
MARGIN = 0.02
FLOORS = {"intake_eval.jsonl": 0.982, "intake_misses.jsonl": 1.000, "intake_status.jsonl": 1.000}


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_macro_f1_on_the_shipped_sets_stays_within_its_margin_of_the_floor(name):
    from intake.reader import rules

    result = evaluation.score(evaluation.load(DATA / name), rules.read, threshold=0.5)
    assert result.macro_f1 >= FLOORS[name] - MARGIN, result.misses
    assert result.f1 >= 0.97, result.misses


def test_coverage_counts_what_goes_to_sorting_below_the_threshold():
    examples = evaluation.load(SMALL)
    sure = evaluation.score(examples, _reading_of(0.9), threshold=0.5)
    unsure = evaluation.score(examples, _reading_of(0.4), threshold=0.5)
    assert (sure.kept, sure.coverage) == (6, 1.0)
    assert (unsure.kept, unsure.coverage, unsure.kept_accuracy) == (0, 0.0, 0.0)
    assert "0 of 6 read (coverage 0.000), 6 to Needs sorting" in "".join(
        evaluation.report("x", unsure)
    )


def test_a_bad_threshold_is_refused():
    with pytest.raises(CommandError, match="--min-confidence must be between 0 and 1"):
        run(str(SMALL), "--min-confidence", "2")


def _reading_of(confidence: float):
    from intake.reader import rules

    def reader(**message):
        reading = rules.read(**message)
        return type(reading)(**{**reading.as_json(), "confidence": confidence})

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
