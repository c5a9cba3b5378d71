"""The benchmark scripts still run end to end (tiny sizes, no figure asserted: speed belongs in
the benchmarks themselves). Both broke once without a test noticing: production's refusal of the
fakes they measure with, and the naive glue's Celery app left current so the full stack's tasks
went to the glue's queue and nothing was ever refunded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.pages import TARGETS  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        settings.IS_POSTGRES,
        reason="the scripts pick their databases themselves: run once, in the embedded suite",
    ),
]


def run(script: str, *args: str, results: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "REFUNDS_"))}
    # A database of their own; a shared machine's sessions name theirs (BENCH_SMOKE_PG_DB).
    smoke_db = os.environ.get("BENCH_SMOKE_PG_DB", "bench_refunds_smoke")
    env |= {"BENCH_RESULTS_DIR": str(results), "BENCH_PG_DB": smoke_db}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def latest(results: Path, name: str) -> dict:
    return json.loads((results / f"{name}-latest.json").read_text())


def test_the_throughput_script_refunds_every_ticket_of_the_full_stack(tmp_path):
    run(
        "throughput.py",
        *("--configs", "embedded:1", "--tickets", "3", "--idle", "2", "--burst", "2"),
        *("--several", "2"),
        results=tmp_path,
    )
    (config,) = latest(tmp_path, "throughput")["results"]
    assert config["full"]["tickets"] == 3 and config["full"]["worker_errors"] == 0
    assert config["latency_idle"]["p50_ms"] > 0 and config["latency_burst"]["p95_ms"] > 0
    assert config["latency_idle_three"]["decisions"] == 2  # two tickets of three orders
    assert config["reader"]["messages_per_s"] > 0
    # Issue 48: the same again with checkpoints encrypted, bare and full.
    assert config["bare_encrypted"]["tickets"] == 3
    assert config["full_encrypted"]["tickets"] == 3
    assert config["full_encrypted"]["worker_errors"] == 0


def test_the_pages_script_fetches_every_page_with_the_same_queries_at_two_sizes(tmp_path):
    done = run(
        "pages.py",
        *("--backends", "sqlite", "--sizes", "100,200", "--requests", "2", "--cards", "kept,none"),
        results=tmp_path,
    )
    out = latest(tmp_path, "pages")
    assert out["queries_constant"] and all(out["queries_constant"].values())
    assert {(r["tickets"], r["cards"]) for r in out["results"]} == {
        (size, cards) for size in (100, 200) for cards in ("kept", "none")
    }
    assert done.stdout.count("with no card cache") == 6, done.stdout
    # Beside Django admin's changelist of the same tickets, in the same run (issue 34).
    anchors = {(a["tickets"], a["page"]) for a in out["anchors"]}
    assert anchors == {(size, page) for size in (100, 200) for page, _, _ in TARGETS}
    assert done.stdout.count("against Django admin's changelist") == 2, done.stdout


def test_the_pages_script_sets_cards_with_lines_beside_cards_without(tmp_path):
    done = run(
        "pages.py",
        *("--backends", "sqlite", "--sizes", "100", "--requests", "2", "--lines", "0,4"),
        results=tmp_path,
    )
    out = latest(tmp_path, "pages")
    assert {(r["tickets"], r["lines"]) for r in out["results"]} == {(100, 0), (100, 4)}
    lined = next(r for r in out["results"] if r["lines"] == 4)
    assert "orders of 4 lines against 0" in done.stdout, done.stdout
    assert done.stdout.count("target <= 1.2x") == 2, done.stdout
    # The cards list the lines without a statement per card: the same queries as without.
    plain = next(r for r in out["results"] if r["lines"] == 0)
    for page in ("queue (agent)", "queue (manager)", "ticket pending (agent)"):
        assert lined["pages"][page]["queries"] == plain["pages"][page]["queries"], page


def test_the_statements_script_counts_what_a_refunded_ticket_costs(tmp_path):
    done = run("statements.py", *("--backends", "embedded", "--tickets", "2"), results=tmp_path)
    assert "app statements" in done.stdout and "checkpoint bytes" in done.stdout


def test_the_hostile_mail_script_reads_every_shape_at_each_size(tmp_path):
    done = run("hostile_mail.py", *("--sizes", "500,1000", "--budget", "30"), results=tmp_path)
    rows = latest(tmp_path, "hostile_mail")["results"]
    assert {row["size"] for row in rows} == {500, 1000}
    assert all(row["seconds"] is not None for row in rows), done.stdout
    assert "1 MB of text" in done.stdout


def test_the_load_script_serves_reviewers_messages_and_the_workers_at_once(tmp_path):
    """PostgreSQL and Redis on this machine (as .ci/run starts them); gunicorn and the workers
    as the Procfile says, a second web node behind Debian's nginx; a few seconds of Locust per
    step."""
    if not Path("/usr/sbin/nginx").exists():
        pytest.skip("Debian's nginx is not installed (apt-get install nginx)")
    done = run(
        "load.py",
        *("--reviewers", "2", "--seconds", "12", "--decide-every", "2,4"),
        *("--batch", "3", "--idle", "2", "--message-rate", "1", "--profile", "3"),
        *("--nodes", "2", "--push"),  # two web nodes behind nginx, reviewers on the stream
        results=tmp_path,
    )
    out = latest(tmp_path, "load")
    assert out["nodes"] == 2 and out["push"], done.stdout
    steps = {step["reviewers"]: step for step in out["steps"]}
    assert set(steps) == {0, 1, 2}, done.stdout
    two = steps[2]
    assert two["errors"] == 0 and two["polls_per_s"] > 0, done.stdout
    assert two["decisions"] > 0 and two["decided_to_refunded_p95_ms"] > 0, done.stdout
    assert two["messages_placed"] > 0 and two["message_to_queue_p95_ms"] > 0, done.stdout
    assert all(step["refunds_per_minute"] > 0 for step in steps.values())
    assert out["idle"]["decisions"] == 2
    assert {t["target"] for t in out["targets"]} >= {"errors"}
    assert "| 2 |" in done.stdout  # the table's row
    # One reviewer alone, the targets' anchor: the queue page and its unchanged poll.
    alone = out["idle_pages"]
    assert alone["loads"] == 2 and alone["queue_p50_ms"] > 0 and alone["poll_p50_ms"] > 0
    assert alone["changed_poll_p50_ms"] > 0 and alone["changed_poll_web_cpu_ms"] > 0
    assert "a changed poll's web CPU / an unchanged one's" in {t["target"] for t in out["targets"]}
    # Where the time goes: each process's CPU, and py-spy's samples of the profiled step.
    busy = two["cpus_busy"]
    assert busy["web"] > 0 and busy["postgres"] > 0 and busy["locust and py-spy"] > 0, busy
    assert busy["web2"] > 0 and busy["events"] > 0 and busy["nginx"] > 0, busy
    assert busy["the whole machine"] >= busy["web"] + busy["worker"], busy
    assert two["profile"]["web"]["samples"] > 0, done.stdout
    assert sum(two["profile"]["web"]["leaf_by_library"].values()) == pytest.approx(1, abs=0.01)
    assert Path(out["chart"]).read_bytes().startswith(b"\x89PNG")


def test_the_load_scripts_profile_summary_names_libraries_and_the_apps_functions(tmp_path):
    """py-spy names a frame's file relative to its sys.path entry, a library's as the app's: the
    summary puts a sample under its leaf-most library, else under the app's own code, and lists
    the app's functions on the stack (a first version matched absolute paths and found none)."""
    from bench.load import summarize_profile

    gunicorn = 'process 1:"gunicorn";process 2:"gunicorn";'
    raw = tmp_path / "profile-web.txt"
    raw.write_text(
        f"{gunicorn}SyncWorker.handle (gunicorn/workers/sync.py:141);"
        "queue (reviews/views/queue.py:250);execute (psycopg/cursor.py:97) 3\n"
        f"{gunicorn}queue (reviews/views/queue.py:250);digest (reviews/rows.py:12) 1\n"
        f"{gunicorn}SyncWorker.accept (gunicorn/workers/sync.py:30) 1\n"
    )
    found = summarize_profile(raw)
    assert found["samples"] == 5
    assert found["leaf_by_library"] == {
        "the database driver (psycopg)": 0.6,
        "the app's own code": 0.2,
        "gunicorn (waiting for a request)": 0.2,
    }
    assert found["app_functions_on_stack"] == {
        "queue (reviews/views/queue.py)": 0.8,
        "digest (reviews/rows.py)": 0.2,
    }
