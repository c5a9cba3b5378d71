"""Exits 1 when any line was refused, 2 when the file itself cannot be read."""

from __future__ import annotations

import csv
import json
import re
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from refunds.order_in import LineIn, LineRefused, OrderIn
from refunds.services import orders
from refunds.services.orders import Read, order_read

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# The columns are the typed order's fields as a push names them; total and paid come with lines.
COLUMNS = [f.alias or name for name, f in OrderIn.model_fields.items() if name != "lines"]
FIELDS, SUMS = tuple(COLUMNS[:-2]), tuple(COLUMNS[-2:])
LINE_FIELDS = tuple(f.alias or name for name, f in LineIn.model_fields.items())
OPTIONAL = frozenset({"payment_reference", "sku", "tax"})
WHOLE = re.compile(r"\s*-?[0-9]{1,12}\s*", re.ASCII)


def bar(done: int, total: int, started: float, width: int = 30) -> str:
    """A progress line: the bar, done and total, orders per second, the time left."""
    filled = width * done // total if total else width
    elapsed = max(time.monotonic() - started, 1e-6)
    rate = done / elapsed
    eta = (total - done) / rate if rate else 0
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,}  "
        f"{rate:,.0f} orders/s  ETA {eta:,.0f} s"
    )


def read_csv(path: Path, delimiter: str, decimal_mark: str) -> Iterator[Read]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = csv.reader(handle, delimiter=delimiter, strict=True)
        try:
            header = [name.strip() for name in next(rows)]
        except StopIteration:
            raise CommandError(f"{path} is empty: it needs a header line.", returncode=2) from None
        with_lines = any(f in header for f in (*SUMS, *LINE_FIELDS))
        columns = (*FIELDS, *SUMS, *LINE_FIELDS) if with_lines else FIELDS
        missing = [f for f in columns if f not in header and f not in OPTIONAL]
        unknown = [f for f in header if f not in columns]
        wrong = [
            missing and f"missing: {', '.join(missing)}",
            unknown and f"unknown: {', '.join(unknown)}",
            len(set(header)) != len(header) and "a column is named twice",
        ]
        if any(wrong):
            raise CommandError(
                f"{path}: the header must name the columns {', '.join(columns)} "
                f"({', '.join(sorted(OPTIONAL & set(columns)))} may be left out); "
                + "; ".join(part for part in wrong if part),
                returncode=2,
            )
        read = _rows(rows, header, rows.line_num + 1)
        if with_lines:
            yield from _orders_of_rows(read, decimal_mark)
            return
        for line, row in read:
            if isinstance(row, LineRefused):
                yield line, "", row
            else:
                yield order_read(line, row, decimal_mark=decimal_mark)


def _rows(rows: Any, header: list[str], start: int) -> Iterator[tuple[int, Any]]:
    """Each CSV line after the header: (its line number, a dict by column, or LineRefused)."""
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as exc:
            yield start, LineRefused(f"not a CSV line: {exc}")
            start = rows.line_num + 1
            continue
        if not any(cell.strip() for cell in row):
            pass  # a blank line
        elif len(row) != len(header):
            yield start, LineRefused(f"{len(row)} fields, the header has {len(header)}")
        else:
            yield start, dict(zip(header, row, strict=True))
        start = rows.line_num + 1


def _orders_of_rows(rows: Iterator[tuple[int, Any]], decimal_mark: str) -> Iterator[Read]:
    """An order's rows follow one another; rows that come again later are a duplicate order."""
    group: list[tuple[int, dict]] = []

    def gathered() -> Read:
        first_line, first = group[0]
        order = {c: first[c] for c in (*FIELDS, *SUMS) if c in first}
        for line, row in group[1:]:
            differ = [c for c in (*FIELDS, *SUMS) if row.get(c, "") != first.get(c, "")]
            if differ:
                why = f"line {line}: {', '.join(differ)} differ(s) from line {first_line}; every "
                return (
                    first_line,
                    order["order_number"],
                    LineRefused(why + "row of an order repeats its columns as they are"),
                )
        # A row whose line columns are all blank is an order sent without lines.
        kept = [(n, row) for n, row in group if any(row.get(c, "").strip() for c in LINE_FIELDS)]
        if kept:
            order["lines"] = [
                {c: _count(row[c]) if c == "quantity" else row[c] for c in LINE_FIELDS if c in row}
                for _, row in kept
            ]
        return order_read(
            first_line, order, decimal_mark=decimal_mark, place=lambda i: f"line {kept[i][0]}"
        )

    for line, row in rows:
        if isinstance(row, LineRefused):
            yield line, "", row
            continue
        if group and row.get("order_number", "").strip() != group[0][1]["order_number"].strip():
            yield gathered()
            group = []
        group.append((line, row))
    if group:
        yield gathered()


def _count(cell: str) -> int | str:
    """The digits as a whole number; anything else left for the order to refuse."""
    return int(cell) if WHOLE.fullmatch(cell) else cell


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def read_jsonl(path: Path, decimal_mark: str) -> Iterator[Read]:
    with path.open(encoding="utf-8-sig") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                # Decimal, never float: "8.99" must stay 8.99.
                raw = json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
            except ValueError as exc:
                yield number, "", LineRefused(f"not valid JSON: {exc}")
                continue
            yield order_read(number, raw, decimal_mark=decimal_mark)


def _format_of(path: Path, options: dict[str, Any]) -> str:
    kind = options["format"] or FORMATS.get(path.suffix.lower())
    if kind is None:
        raise CommandError(
            f"Cannot tell the format of {path.name}: name it .csv or .jsonl, or pass --format.",
            returncode=2,
        )
    if not path.is_file():
        raise CommandError(f"There is no file {path}.", returncode=2)
    if len(options["delimiter"]) != 1:
        raise CommandError("--delimiter must be one character.", returncode=2)
    if kind == "csv" and options["delimiter"] == options["decimal_mark"]:
        raise CommandError("--delimiter and --decimal-mark must differ.", returncode=2)
    return kind


class Command(BaseCommand):
    help = "Create or update orders by number from a CSV or JSON Lines file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--format", choices=["csv", "jsonl"], help="else from the suffix")
        parser.add_argument(
            "--dry-run", action="store_true", help="check and report; write nothing"
        )
        parser.add_argument(
            "--decimal-mark",
            choices=[".", ","],
            default=".",
            help="how the file writes amounts' decimals: 8.99 or 8,99 (JSON numbers use '.')",
        )
        parser.add_argument("--delimiter", default=",", help="CSV field separator (e.g. ';')")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        kind = _format_of(path, options)
        started = time.monotonic()
        try:
            mark = options["decimal_mark"]
            read = list(
                read_csv(path, options["delimiter"], mark)
                if kind == "csv"
                else read_jsonl(path, mark)
            )
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text ({exc.reason}).", returncode=2) from None
        show = not options["no_progress"]

        def progress(done: int, total: int) -> None:
            if show:
                self.stderr.write(f"\r{bar(done, total, started)}", ending="")

        outcomes = orders.orders_upsert(read, dry_run=options["dry_run"], progress=progress)
        if show and outcomes:
            self.stderr.write("")
        refused = [o for o in outcomes if o.result == orders.REFUSED]
        for outcome in refused:
            named = f" (order {outcome.order_number})" if outcome.order_number else ""
            self.stdout.write(f"line {outcome.line}{named}: {outcome.reason}")
        tally = orders.counts(outcomes)
        dry = options["dry_run"]
        said = ", ".join(
            f"{n:,} {'would be ' if dry and k in (orders.CREATED, orders.UPDATED) else ''}{k}"
            for k, n in tally.items()
        )
        seconds = time.monotonic() - started
        self.stdout.write(
            f"{'Dry run, nothing written. ' if dry else ''}{path.name}: "
            f"{len(outcomes):,} order line(s) in {seconds:.1f} s: {said}."
        )
        if refused:
            raise CommandError(f"{len(refused):,} line(s) refused; see above.", returncode=1)
