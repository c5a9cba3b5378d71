"""Measure the intake's reader on labelled messages.

    python manage.py eval_intake [FILE] [--model SPEC] [--misses] [--min-confidence N]

FILE holds JSON Lines ({"sender", "subject", "body", "orders": [...], "reason"}); it defaults to
the shipped set, tests/data/intake_eval.jsonl. The rules reader is always measured; a model too
when REFUNDS_MODEL is set or --model names one (provider:model). A model that cannot be reached
is reported with how many messages fell back to the rules, never as a crash. Coverage and
accuracy are counted at --min-confidence (default REFUNDS_READER_MIN_CONFIDENCE): readings less
sure go to "Needs sorting". Exit status 2 when
the file cannot be read or a line is bad (its number is named)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.modelspec import model_spec_error
from devtools import evaluation
from intake.reader import rules

SHIPPED = Path(settings.BASE_DIR) / "tests" / "data" / "intake_eval.jsonl"


class Command(BaseCommand):
    help = (
        "Order-number precision/recall/F1, reason accuracy, per-reading F1 and macro-F1, and "
        "coverage against accuracy of the reader on labelled messages."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", nargs="?", default=str(SHIPPED), help="JSON Lines file")
        parser.add_argument("--model", default="", help="provider:model (default REFUNDS_MODEL)")
        parser.add_argument("--misses", action="store_true", help="list every misread line")
        parser.add_argument(
            "--min-confidence",
            type=float,
            default=None,
            help="threshold for coverage (default REFUNDS_READER_MIN_CONFIDENCE)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        given = options["model"].strip()
        if error := model_spec_error("--model", given):
            raise CommandError(error, returncode=2)
        spec = given or settings.REFUNDS_MODEL
        threshold = options["min_confidence"]
        if threshold is None:
            threshold = settings.REFUNDS_READER_MIN_CONFIDENCE
        if not 0.0 <= threshold <= 1.0:
            raise CommandError("--min-confidence must be between 0 and 1", returncode=2)
        try:
            examples = evaluation.load(Path(options["file"]))
        except evaluation.BadFile as exc:
            raise CommandError(str(exc), returncode=2) from None
        self.stdout.write(f"{options['file']}: {len(examples)} messages")
        readers: list[tuple[str, evaluation.Reader]] = [("rules", rules.read)]
        if spec:
            from intake.reader import model

            readers.append((spec, partial(model.read, spec=spec)))
        for name, reader in readers:
            result = evaluation.score(examples, reader, threshold=threshold)
            self.stdout.write("")
            if name != "rules" and sum(result.fallbacks.values()) == result.messages:
                # Figures would be the rules' again under the model's name: say what happened.
                self.stdout.write(
                    f"{name}: read no message; all {result.messages} were read by the rules"
                )
                for why, n in result.fallbacks.most_common():
                    self.stdout.write(f"  fell back to rules: {n} of {result.messages}: {why}")
                continue
            for line in evaluation.report(name, result):
                self.stdout.write(line)
            if options["misses"]:
                for miss in result.misses:
                    self.stdout.write(f"  {miss}")
