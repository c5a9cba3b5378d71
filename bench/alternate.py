"""Two checkouts side by side in one run: `bench/statements.py` against each in turn, round after
round, so a loaded machine's swings fall on both alike (what a fast path needs to be kept).

    git worktree add /tmp/before main   # or any other commit
    .venv/bin/python bench/alternate.py /tmp/before . --rounds 5 --tickets 40

Prints, per checkout, the median of the rounds' per-ticket medians and their range (min-max).
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
from pathlib import Path

STATEMENTS = Path(__file__).resolve().parent / "statements.py"


def one_round(checkout: str, backend: str, tickets: int) -> dict:
    out = subprocess.run(
        [sys.executable, str(STATEMENTS), "--one", backend, "--tickets", str(tickets)],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return ast.literal_eval(out.split("RESULT ", 1)[1].strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs=2)
    parser.add_argument("--backend", default="postgres")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tickets", type=int, default=40)
    args = parser.parse_args()
    rounds: dict[str, list[dict]] = {c: [] for c in args.checkouts}
    for n in range(args.rounds):
        for checkout in args.checkouts if n % 2 == 0 else reversed(args.checkouts):
            rounds[checkout].append(one_round(checkout, args.backend, args.tickets))
            print(f"round {n + 1}: {checkout} done", flush=True)
    keys = sorted({k for results in rounds.values() for r in results for k in r})
    print(f"\n{'median of rounds (min-max)':<36}" + "".join(f"{c:>28}" for c in args.checkouts))
    for key in keys:
        cells = []
        for checkout in args.checkouts:
            values = [r[key] for r in rounds[checkout] if key in r]
            cells.append(
                f"{statistics.median(values):8.1f} ({min(values):.1f}-{max(values):.1f})"
                if values
                else "-"
            )
        print(f"{key:<36}" + "".join(f"{cell:>28}" for cell in cells))


if __name__ == "__main__":
    main()
