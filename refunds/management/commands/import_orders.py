"""Import the shop's orders from a CSV or JSON Lines file: an upsert by order number.

    python manage.py import_orders orders.csv [--dry-run] [--decimal-mark ,] [--delimiter ;]

Columns (CSV header) or keys (one JSON object a line): order_number, customer_name,
customer_email, currency (ISO 4217), shipping_fee (in the currency's major unit, "8.99"),
promised_on and delivered_on (YYYY-MM-DD), payment_reference (optional). An order with its
lines adds total and paid, and its lines: in JSON Lines nested (`"lines": [{"line_id", "sku",
"title", "unit_price", "quantity", "tax"}, ...]`), in CSV one row per line with the order's
columns repeated on each (the rows of one order one after another) and the columns line_id,
sku, title, unit_price, quantity, tax (sku and tax may be left out). Every refused line is
reported with its line number and reason; the exit status is 1 when any line was refused, 2
when the file itself cannot be read."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from refunds.services import orders
from refunds.services.orders import LineRefused

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


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


def read_csv(path: Path, delimiter: str) -> Iterator[tuple[int, Any]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = csv.reader(handle, delimiter=delimiter, strict=True)
        try:
            header = [name.strip() for name in next(rows)]
        except StopIteration:
            raise CommandError(f"{path} is empty: it needs a header line.", returncode=2) from None
        with_lines = any(f in header for f in (*orders.SUMS, *orders.LINE_FIELDS))
        columns = (
            (*orders.FIELDS, *orders.SUMS, *orders.LINE_FIELDS) if with_lines else orders.FIELDS
        )
        optional = orders.OPTIONAL | orders.LINE_OPTIONAL
        missing = [f for f in columns if f not in header and f not in optional]
        unknown = [f for f in header if f not in columns]
        if missing or unknown or len(set(header)) != len(header):
            raise CommandError(
                f"{path}: the header must name the columns {', '.join(columns)} "
                f"({', '.join(sorted(optional & set(columns)))} may be left out); "
                + "; ".join(
                    part
                    for part in (
                        missing and f"missing: {', '.join(missing)}",
                        unknown and f"unknown: {', '.join(unknown)}",
                        len(set(header)) != len(header) and "a column is named twice",
                    )
                    if part
                ),
                returncode=2,
            )
        start = rows.line_num + 1
        if with_lines:
            yield from _orders_of_rows(_rows(rows, header, start))
            return
        yield from _rows(rows, header, start)


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


def _orders_of_rows(rows: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
    """Rows of one line each -> one order each: the rows of an order follow one another and
    repeat its columns (any that differ refuse the whole order, naming the line). An order
    whose rows come again later is two orders with one number: both refused, as any duplicate."""
    order_columns = (*orders.FIELDS, *orders.SUMS)
    group: list[tuple[int, dict]] = []

    def gathered() -> Iterator[tuple[int, Any]]:
        first_line, first = group[0]
        for line, row in group[1:]:
            differ = [c for c in order_columns if row.get(c, "") != first.get(c, "")]
            if differ:
                refused = LineRefused(
                    f"line {line}: {', '.join(differ)} differ(s) from line {first_line}; every "
                    "row of an order repeats its columns as they are"
                )
                yield first_line, orders.OrderRows(first, [first_line], refused)
                return
        fields = {c: first[c] for c in order_columns if c in first}
        # A row whose line columns are all blank is an order sent without lines.
        kept = [
            (n, {c: row[c] for c in orders.LINE_FIELDS if c in row})
            for n, row in group
            if any(row.get(c, "").strip() for c in orders.LINE_FIELDS)
        ]
        lines = {"lines": [item for _, item in kept]} if kept else {}
        yield first_line, orders.OrderRows({**fields, **lines}, [n for n, _ in kept])

    for line, row in rows:
        if isinstance(row, LineRefused):
            yield line, row
            continue
        if group and row.get("order_number", "").strip() != group[0][1]["order_number"].strip():
            yield from gathered()
            group = []
        group.append((line, row))
    if group:
        yield from gathered()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open(encoding="utf-8-sig") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                # Decimal, never float: "8.99" must stay 8.99.
                yield number, json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
            except ValueError as exc:
                yield number, LineRefused(f"not valid JSON: {exc}")


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
        started = time.monotonic()
        try:
            lines = list(
                read_csv(path, options["delimiter"]) if kind == "csv" else read_jsonl(path)
            )
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text ({exc.reason}).", returncode=2) from None
        show = not options["no_progress"]

        def progress(done: int, total: int) -> None:
            if show:
                self.stderr.write(f"\r{bar(done, total, started)}", ending="")

        outcomes = orders.orders_upsert(
            lines,
            decimal_mark=options["decimal_mark"],
            dry_run=options["dry_run"],
            progress=progress,
        )
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
