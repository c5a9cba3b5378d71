"""Map the public customer-support data to the desk's readings and split it.

    python manage.py map_public_data FOLDER [--output DIR]

FOLDER holds Bitext's and BANKING77's CSV files and their licences (as the project's shared data
folder does); DIR (default tests/data/public) receives train.jsonl, dev.jsonl and the licences.
The mapping and the split are devtools/public_data.py's; tests/data/public/NOTICE.md says what
was changed. Exit status 2 when a file is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools import public_data

SHIPPED = Path(settings.BASE_DIR) / "tests" / "data" / "public"


class Command(BaseCommand):
    help = "Map Bitext's and BANKING77's messages to the desk's readings, split train/dev."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder", help="the folder with the two CSV files and their licences")
        parser.add_argument("--output", default=str(SHIPPED), help="where to write")

    def handle(self, *args: Any, **options: Any) -> None:
        folder = Path(options["folder"])
        needed = (public_data.BITEXT, public_data.BANKING77, *public_data.LICENCES)
        missing = [name for name in needed if not (folder / name).is_file()]
        if missing:
            raise CommandError(f"{folder} lacks {', '.join(missing)}", returncode=2)
        counts = public_data.write(folder, Path(options["output"]))
        self.stdout.write(
            f"{options['output']}: train.jsonl {counts['train']:,} lines, "
            f"dev.jsonl {counts['dev']:,} lines"
        )
