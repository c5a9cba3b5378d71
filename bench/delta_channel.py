"""A long `notes` history: LangGraph's default list reducer against `DeltaChannel` (beta).

    .venv/bin/python bench/delta_channel.py                      # 10, 50 and 200 notes
    .venv/bin/python bench/delta_channel.py --turns 10,50 --note-bytes 2000 --reads 50

One thread per (channel, turns) on a fresh SQLite file, durability "sync" as the desk runs: a node
adds one note per step (the desk's notes are ~100 bytes; --note-bytes makes them bigger). Printed:
the bytes the thread holds (checkpoints and writes) and the median time of `get_state` on the
finished thread. Bare LangGraph (SqliteSaver), no Django: the figures are the channel's own.
"""

from __future__ import annotations

import argparse
import operator
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph


def concat(state: list, writes: list) -> list:
    out = list(state or [])
    for w in writes:
        out.extend(w)
    return out


class Plain(TypedDict, total=False):
    turns: int
    notes: Annotated[list[str], operator.add]


class Delta(TypedDict, total=False):
    turns: int
    notes: Annotated[list[str], DeltaChannel(concat)]


def build(schema, turns: int, note: str):
    def add_note(state) -> dict:
        n = len(state.get("notes") or [])
        return {"notes": [f"{n}: {note}"]}

    def more(state) -> str:
        return "add_note" if len(state.get("notes") or []) < turns else END

    g = StateGraph(schema)
    g.add_node("add_note", add_note)
    g.add_edge(START, "add_note")
    g.add_conditional_edges("add_note", more, ["add_note", END])
    return g


def measure(kind: str, turns: int, note_bytes: int, reads: int, folder: Path) -> dict:
    path = folder / f"{kind}-{turns}.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    graph = build(Plain if kind == "default" else Delta, turns, "x" * note_bytes).compile(
        checkpointer=saver
    )
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": turns * 2 + 10}
    started = time.perf_counter()
    graph.invoke({"turns": turns}, config, durability="sync")
    run = time.perf_counter() - started
    size = conn.execute(
        "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints)"
        " + (SELECT coalesce(sum(length(value)), 0) FROM writes)"
    ).fetchone()[0]
    times = []
    for _ in range(reads):
        t = time.perf_counter()
        state = graph.get_state(config)
        times.append(time.perf_counter() - t)
    assert len(state.values["notes"]) == turns, (kind, len(state.values["notes"]))
    conn.close()
    return {
        "channel": kind,
        "turns": turns,
        "bytes": size,
        "get_state_ms": statistics.median(times) * 1000,
        "run_s": run,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="10,50,200")
    parser.add_argument("--note-bytes", type=int, default=100)
    parser.add_argument("--reads", type=int, default=30)
    args = parser.parse_args()
    print(f"notes of {args.note_bytes} bytes; median of {args.reads} get_state calls")
    print(f"{'turns':>6} {'channel':>8} {'bytes':>12} {'get_state ms':>13} {'run s':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for turns in (int(t) for t in args.turns.split(",")):
            rows = [
                measure(kind, turns, args.note_bytes, args.reads, Path(tmp))
                for kind in ("default", "delta")
            ]
            for r in rows:
                print(
                    f"{r['turns']:>6} {r['channel']:>8} {r['bytes']:>12,} "
                    f"{r['get_state_ms']:>13.2f} {r['run_s']:>7.2f}"
                )
            d, x = rows
            print(
                f"{'':>6} {'ratio':>8} {x['bytes'] / d['bytes']:>12.2f} "
                f"{x['get_state_ms'] / d['get_state_ms']:>13.2f}"
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
