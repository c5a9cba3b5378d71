"""Train the reader's classifier and measure it.

    python manage.py train_reader [--public DIR] [--with FILE ...] [--measure FILE ...]
                                  [--output PATH] [--seed N]

DIR (default tests/data/public) holds the public messages mapped to the desk's readings, already
split: train.jsonl (fitted on) and dev.jsonl (calibrated and measured on). The project's own
labelled sets (tests/data/intake_misses.jsonl, intake_status.jsonl) and each --with FILE (say,
what `export_corrections` wrote) join them, each message on the side its text's hash puts it
(intake/reader/training.py, part_of). Each --measure FILE (default tests/data/intake_eval.jsonl)
is only measured, never learnt from. The model goes to PATH (default REFUNDS_READER_FILE), a
skops file. The same data and seed make the same model. Exit status 2 when a file cannot be read
or the model cannot be written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from intake.reader import trained, training

DATA = Path(settings.BASE_DIR) / "tests" / "data"
OWN = (DATA / "intake_misses.jsonl", DATA / "intake_status.jsonl")
MEASURED = (DATA / "intake_eval.jsonl",)


class Command(BaseCommand):
    help = "Train the reader's classifier on the shipped data, calibrate it, and measure it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--public", default=str(DATA / "public"), help="train.jsonl, dev.jsonl")
        parser.add_argument(
            "--with", dest="extra", action="append", default=[], help="more labelled lines"
        )
        parser.add_argument(
            "--measure", action="append", default=None, help="labelled lines to measure only"
        )
        parser.add_argument("--output", default="", help="default REFUNDS_READER_FILE")
        parser.add_argument("--seed", type=int, default=training.SEED)

    def handle(self, *args: Any, **options: Any) -> None:
        output = Path(options["output"] or settings.REFUNDS_READER_FILE)
        _writable(output)
        try:
            public = Path(options["public"])
            train, dev = _parts(public, [*OWN, *map(Path, options["extra"])])
            measured = [
                (Path(m).name, training.load(Path(m))) for m in options["measure"] or MEASURED
            ]
            self.stdout.write(f"training part: {training.counted(train)}")
            self.stdout.write(f"development part: {training.counted(dev)}")
            model = training.fit(train, dev, seed=options["seed"])
        except training.BadData as exc:
            raise CommandError(str(exc), returncode=2) from None
        about = {"seed": options["seed"], "train": len(train), "dev": len(dev)}
        try:
            size = trained.save(model, about, output)
        except OSError as exc:
            raise CommandError(
                f"{output} cannot be written: {exc.strerror}", returncode=2
            ) from None
        classifier, seconds = trained.timed_load(output)
        self.stdout.write(f"{output}: {size / 1e6:.1f} MB, loads in {seconds * 1000:.0f} ms")
        for name, rows in _measured_sets(train, dev, public, measured):
            self.stdout.write("")
            for line in training.report(training.measure(classifier, rows, name)):
                self.stdout.write(line)


def _parts(
    public: Path, own: list[Path]
) -> tuple[list[training.Labelled], list[training.Labelled]]:
    """The public parts as shipped, and each own file's lines on the side their hash puts them."""
    train = training.load(public / "train.jsonl")
    dev = training.load(public / "dev.jsonl")
    for path in own:
        own_train, own_dev = training.split(training.load(path))
        train += own_train
        dev += own_dev
    return train, dev


def _measured_sets(
    train: list[training.Labelled],
    dev: list[training.Labelled],
    public: Path,
    measured: list[tuple[str, list[training.Labelled]]],
) -> list[tuple[str, list[training.Labelled]]]:
    """The development part, in all, its public part and by source, then each file measured
    only, saying how many of its messages the model saw anyway (fitted or calibrated on)."""
    own = {path.name for path in OWN}
    sets = [("development part", dev)]
    sets.append((f"  of it {public.name}/dev.jsonl", [r for r in dev if r.source not in own]))
    for source in sorted({r.source for r in dev}):
        sets.append((f"  of it {source}", [r for r in dev if r.source == source]))
    seen_texts = {r.text for r in train} | {r.text for r in dev}
    for name, rows in measured:
        seen = sum(1 for r in rows if r.text in seen_texts)
        sets.append((f"{name} (measured only{f'; {seen} also learnt from' if seen else ''})", rows))
    return sets


def _writable(path: Path) -> None:
    """Refuse a path the model cannot be written to before training, not after."""
    if path.parent.exists() and not path.parent.is_dir():
        raise CommandError(f"{path} cannot be written: {path.parent} is not a folder", returncode=2)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(
            f"{path.parent} cannot be created: {exc.strerror}", returncode=2
        ) from None
    if path.is_dir():
        raise CommandError(f"{path} is a folder: name the model's file", returncode=2)
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise CommandError(f"{path} cannot be written: {path.parent} is not writable", returncode=2)
