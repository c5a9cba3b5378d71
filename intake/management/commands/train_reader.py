"""Train the reader's classifier and measure it.

    python manage.py train_reader [--public DIR] [--with FILE ...] [--output PATH] [--seed N]

DIR (default tests/data/public) holds the public messages mapped to the desk's readings, already
split: train.jsonl (fitted on) and dev.jsonl (calibrated on). The project's own labelled sets
(training.OWN: tests/data/desk_*.jsonl, intake_*.jsonl) and each --with FILE (say, what
`export_corrections` wrote) join them, each message on the side its text's hash puts it
(intake/reader/training.py, part_of). The model goes to PATH (default REFUNDS_READER_FILE), an
.npz file of numpy arrays, with a fingerprint of the data it learnt from. The same data and seed
make the same model. It prints the classifier's accuracy on each source's development part;
`eval_intake` measures the whole reader. Exit status 2 when a file cannot be read or the model
cannot be written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sklearn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from intake.reader import trained, training


class Command(BaseCommand):
    help = "Train the reader's classifier on the shipped data, calibrate it, and measure it."
    requires_system_checks: list[str] = []  # one of them asks for the file this makes

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--public", default=str(training.PUBLIC), help="train.jsonl, dev.jsonl")
        parser.add_argument(
            "--with", dest="extra", action="append", default=[], help="more labelled lines"
        )
        parser.add_argument("--output", default="", help="default REFUNDS_READER_FILE")
        parser.add_argument("--seed", type=int, default=training.SEED)

    def handle(self, *args: Any, **options: Any) -> None:
        output = Path(options["output"] or settings.REFUNDS_READER_FILE)
        _writable(output)
        try:
            public = Path(options["public"])
            files = [
                public / "train.jsonl",
                public / "dev.jsonl",
                *training.OWN,
                *map(Path, options["extra"]),
            ]
            train, dev = _parts(public, files[2:])
            self.stdout.write(f"training part: {training.counted(train)}")
            self.stdout.write(f"development part: {training.counted(dev)}")
            model = training.fit(train, dev, seed=options["seed"])
        except training.BadData as exc:
            raise CommandError(str(exc), returncode=2) from None
        about = {
            "seed": options["seed"],
            "train": len(train),
            "dev": len(dev),
            "data": training.fingerprint(files),
            "sklearn": sklearn.__version__,
        }
        try:
            size = trained.save(training.exported(model, about), output)
        except OSError as exc:
            raise CommandError(
                f"{output} cannot be written: {exc.strerror}", returncode=2
            ) from None
        classifier, seconds = trained.timed_load(output)
        self.stdout.write(f"{output}: {size / 1e6:.1f} MB, loads in {seconds * 1000:.0f} ms")
        self.stdout.write("the classifier alone on the development part:")
        for source in sorted({r.source for r in dev}):
            rows = [r for r in dev if r.source == source]
            right = sum(classifier.ranked(r.text)[0][0] == r.reason for r in rows)
            self.stdout.write(f"  {source}: {right} of {len(rows)} right ({right / len(rows):.3f})")


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
