"""Measure the intake's reader on labelled messages.

    python manage.py eval_intake [FILE ...] [--dev-part] [--model SPEC] [--misses]
                                 [--min-confidence N] [--curve PNG]

Each FILE holds JSON Lines ({"sender", "subject", "body", "orders": [...], "reason"}, and a
"source" if its lines come from several). Without FILE it measures what the reader was not
trained on of the shipped sets: the public development part (tests/data/public/dev.jsonl, by
source) and the development part of each of the project's own sets (intake/reader/training.py,
OWN). --dev-part keeps only a FILE's development part too. The trained reader is always
measured; a model too when REFUNDS_MODEL is set or --model names one (provider:model). A model
that cannot be reached is reported with how many messages fell back, never as a crash. Coverage
and accuracy are counted at --min-confidence (default REFUNDS_READER_MIN_CONFIDENCE), and at
each threshold in a table; --curve writes the coverage against accuracy of each set as a PNG.
Exit status 2 when a file cannot be read or a line is bad (its number is named)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.modelspec import model_spec_error
from devtools import evaluation
from intake.reader import default, training
from intake.reader.trained import text_of


class Command(BaseCommand):
    help = (
        "Order-number precision/recall/F1, reason accuracy, per-reading F1 and macro-F1, and "
        "coverage against accuracy of the reader on labelled messages."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="*", help="JSON Lines files (default: the shipped sets)")
        parser.add_argument("--dev-part", action="store_true", help="only the development part")
        parser.add_argument("--curve", default="", help="write coverage against accuracy here")
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
            sets = _sets(options["files"], dev_part=options["dev_part"])
        except evaluation.BadFile as exc:
            raise CommandError(str(exc), returncode=2) from None
        readers: list[tuple[str, evaluation.Reader]] = [("classifier", default.read)]
        if spec:
            from intake.reader import model

            readers.append((spec, partial(model.read, spec=spec)))
        drawn: list[tuple[str, evaluation.Score]] = []
        for name, reader in readers:
            for source, examples in sets:
                result = evaluation.score(examples, reader, threshold=threshold)
                self.stdout.write("")
                if reader is not default.read and result.messages == result.fallbacks.total():
                    # Figures would be the classifier's under the model's name: say so.
                    self.stdout.write(f"{name} on {source}: read no message; every one fell back")
                    for why, n in result.fallbacks.most_common():
                        self.stdout.write(f"  fell back: {n} of {result.messages}: {why}")
                    continue
                for line in evaluation.report(f"{name} on {source}", result):
                    self.stdout.write(line)
                if options["misses"]:
                    for miss in result.misses:
                        self.stdout.write(f"  {miss}")
                drawn.append((f"{name}, {source}", result))
        if options["curve"]:
            evaluation.curve(drawn, Path(options["curve"]))
            self.stdout.write(f"\ncoverage against accuracy: {options['curve']}")


def _sets(files: list[str], *, dev_part: bool) -> list[tuple[str, list[evaluation.Example]]]:
    """(name, examples) to measure: each file by its sources, development parts where asked."""
    if not files:
        shipped = [(training.PUBLIC / "dev.jsonl", False)]
        shipped += [(path, True) for path in training.OWN]
    else:
        shipped = [(Path(f), dev_part) for f in files]
    sets = []
    for path, only_dev in shipped:
        examples = evaluation.load(path)
        if only_dev:
            examples = [
                e for e in examples if training.part_of(text_of(e.subject, e.body)) == "dev"
            ]
        for source in sorted({e.source for e in examples}):
            named = f"{path.name}{' (development part)' if only_dev else ''}"
            if source != path.name:
                named += f", {source}"
            sets.append((named, [e for e in examples if e.source == source]))
    return sets
