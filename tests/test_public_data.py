"""The public data shipped in tests/data/public/: Bitext's and BANKING77's messages mapped to the
desk's readings (a refund asked for is "other" unless its words name a reason, one asked after is
"where is my refund", the rest "not about a refund"), split by a hash of the text into a training
and a development part that share no message, the licences beside them."""

from __future__ import annotations

import csv
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from devtools import public_data
from intake.reader.trained import text_of
from intake.reader.training import part_of
from refunds import policy

PUBLIC = Path(__file__).resolve().parent / "data" / "public"


def shipped(part: str) -> list[dict]:
    lines = (PUBLIC / f"{part}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def bitext_row(intent: str, text: str, **entity: str) -> dict[str, str]:
    return {"instruction": text, "intent": intent, "entity_type": "", "entity_value": "", **entity}


@pytest.mark.parametrize(
    ("intent", "text", "reason"),
    [
        ("request_refund", "I want a refund", policy.OTHER_REQUEST),
        ("request_refund", "i bought the wrong size and would like a refund", policy.OTHER_REQUEST),
        ("request_refund", "My product was faulty.", policy.DAMAGED),
        (
            "request_refund",
            "I received the wrong color and size, can I return it?",
            policy.WRONG_ITEM,
        ),
        (
            "request_refund",
            "I have not received an item i ordered yet so i want to cancel it and get a refund.",
            policy.NOT_RECEIVED,
        ),
        ("Refund_not_showing_up", "My refund is not showing up", policy.REFUND_STATUS),
        ("card_arrival", "I am still waiting on my card?", policy.NOT_REFUND),
    ],
)
def test_a_banking77_message_is_read_as_the_mapping_says(intent, text, reason):
    assert public_data.banking77({"text": text, "category": intent}).reason == reason


def test_a_bitext_message_is_read_as_the_mapping_says_and_keeps_its_order_number():
    asked = public_data.bitext(bitext_row("get_refund", "I need help to request a refund of money"))
    after = public_data.bitext(bitext_row("track_refund", "checking refund status"))
    policy_question = public_data.bitext(bitext_row("check_refund_policy", "refund policy?"))
    cancel = public_data.bitext(
        bitext_row(
            "cancel_order",
            "how can I cancel purchase 113542617735902?",
            entity_type="order_id",
            entity_value="113542617735902",
        )
    )

    assert (asked.reason, asked.orders) == (policy.OTHER_REQUEST, [])
    assert after.reason == policy.REFUND_STATUS
    assert policy_question.reason == policy.NOT_REFUND
    assert (cancel.reason, cancel.orders, cancel.intent) == (
        policy.NOT_REFUND,
        ["113542617735902"],
        "cancel_order",
    )


def test_the_shipped_files_hold_known_rows_as_mapped():
    rows = {row["body"]: row for part in ("train", "dev") for row in shipped(part)}

    assert rows["My product was faulty."]["reason"] == policy.DAMAGED
    assert rows["I need help to request a refund of money"]["reason"] == policy.OTHER_REQUEST
    assert rows["checking refund status"]["reason"] == policy.REFUND_STATUS
    assert rows["how can I cancel purchase 113542617735902?"]["orders"] == ["113542617735902"]
    assert {row["source"] for row in rows.values()} == {"bitext", "banking77"}
    assert len(rows) == 13_135


def test_the_split_goes_by_the_text_so_the_parts_share_no_message():
    train, dev = shipped("train"), shipped("dev")
    assert all(part_of(text_of("", row["body"])) == "train" for row in train)
    assert all(part_of(text_of("", row["body"])) == "dev" for row in dev)
    key = lambda row: " ".join(row["body"].casefold().split())  # noqa: E731
    assert {key(row) for row in train}.isdisjoint(key(row) for row in dev)
    assert 0.15 < len(dev) / (len(train) + len(dev)) < 0.25
    # Case and spacing do not move a message to the other side.
    assert part_of("Where is my REFUND?") == part_of("  where is  my refund? ")


def test_the_licences_are_shipped_beside_the_data_with_a_notice_of_the_changes():
    notice = (PUBLIC / "NOTICE.md").read_text(encoding="utf-8")
    assert "What was changed" in notice and "CDLA-Sharing" in notice
    assert "Community Data License Agreement" in (PUBLIC / "bitext-LICENSE.txt").read_text()
    assert "Attribution 4.0 International" in (PUBLIC / "banking77-LICENSE.txt").read_text()


def test_map_public_data_writes_both_parts_and_the_licences(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    with (source / public_data.BITEXT).open("w", newline="") as file:
        writer = csv.DictWriter(file, ["instruction", "intent", "entity_type", "entity_value"])
        writer.writeheader()
        writer.writerow(bitext_row("track_refund", "where is my refund?"))
        writer.writerow(bitext_row("track_refund", "Where is my  refund?"))  # the same text again
    with (source / public_data.BANKING77).open("w", newline="") as file:
        writer = csv.DictWriter(file, ["text", "category"])
        writer.writeheader()
        for n in range(40):
            writer.writerow({"text": f"card {n} has not arrived", "category": "card_arrival"})
    for licence in public_data.LICENCES:
        (source / licence).write_text(f"the text of {licence}\n")
    out = StringIO()

    call_command("map_public_data", str(source), "--output", str(tmp_path / "out"), stdout=out)

    lines = [
        json.loads(line)
        for part in ("train", "dev")
        for line in (tmp_path / "out" / f"{part}.jsonl").read_text().splitlines()
    ]
    assert len(lines) == 41 and "train.jsonl" in out.getvalue()
    assert lines.count(lines[0]) == 1
    for licence in public_data.LICENCES:
        assert (tmp_path / "out" / licence).read_text() == f"the text of {licence}\n"


def test_map_public_data_names_the_files_it_lacks(tmp_path):
    with pytest.raises(CommandError, match="lacks bitext-customer-support-70pct.csv") as raised:
        call_command("map_public_data", str(tmp_path), "--output", str(tmp_path / "out"))
    assert raised.value.returncode == 2
