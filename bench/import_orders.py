"""How long `manage.py import_orders` takes: a file of N orders made here, imported into a fresh
database, then imported again (every line unchanged), then with every tenth fee changed, then
with every fee changed.

    .venv/bin/python bench/import_orders.py                          # 100,000 orders, SQLite
    .venv/bin/python bench/import_orders.py --backends sqlite,postgres --orders 100000

Each import is the command as an operator runs it (a process of its own, `--no-progress`), timed
from start to exit; the database is migrated before the clock starts. The target: 100,000 orders
in under 60 s on each backend.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, prepare_environment, say  # noqa: E402

CURRENCIES = ["USD", "USD", "USD", "EUR", "GBP", "JPY", "KWD"]


def make_file(path: Path, orders: int, *, bump_every: int = 0) -> None:
    promised = date(2026, 10, 1)
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(
            [
                "order_number",
                "customer_name",
                "customer_email",
                "currency",
                "shipping_fee",
                "promised_on",
                "delivered_on",
                "payment_reference",
            ]
        )
        for n in range(orders):
            currency = CURRENCIES[n % len(CURRENCIES)]
            cents = 299 + n % 5000 + (100 if bump_every and n % bump_every == 0 else 0)
            fee = {"JPY": str(cents), "KWD": f"{cents / 1000:.3f}"}.get(
                currency, f"{cents / 100:.2f}"
            )
            out.writerow(
                [
                    f"B{n:07d}",
                    f"Customer {n}",
                    f"customer{n}@example.com",
                    currency,
                    fee,
                    (promised + timedelta(days=n % 60)).isoformat(),
                    (promised + timedelta(days=n % 60 + n % 7 - 2)).isoformat(),
                    f"pi_{n:024d}",
                ]
            )


def timed_import(path: Path) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "manage.py", "import_orders", str(path), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"import failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr}")
    return seconds, done.stdout.strip().splitlines()[-1]


def run(backend: str, orders: int) -> list[tuple[str, float, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        prepare_environment(backend, Path(tmp), LOG_LEVEL="ERROR")
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"],
            cwd=ROOT,
            check=True,
            env=os.environ.copy(),
        )
        first, bumped = Path(tmp) / "orders.csv", Path(tmp) / "orders-changed.csv"
        every = Path(tmp) / "orders-all-changed.csv"
        make_file(first, orders)
        make_file(bumped, orders, bump_every=10)
        make_file(every, orders, bump_every=1)
        rows = []
        runs = (("new", first), ("again", first), ("10% changed", bumped), ("all changed", every))
        for label, path in runs:
            seconds, said = timed_import(path)
            say(f"{backend}: {label}: {seconds:.1f} s ({orders / seconds:,.0f} orders/s): {said}")
            rows.append((label, seconds, said))
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--backends", default="sqlite", help="sqlite,postgres")
    args = parser.parse_args()
    results = {b: run(b, args.orders) for b in args.backends.split(",")}
    print("\n| backend | import | seconds | orders/s |\n|---|---|---|---|")
    for backend, rows in results.items():
        for label, seconds, _ in rows:
            print(f"| {backend} | {label} | {seconds:.1f} | {args.orders / seconds:,.0f} |")


if __name__ == "__main__":
    main()
