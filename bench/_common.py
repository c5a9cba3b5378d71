"""What the benchmark scripts share: their own databases and data folders, worker processes,
percentiles, progress lines, machine info and the JSON results file.

Benchmarks never touch var/ or a test database: every run gets a temporary REFUNDS_DATA_DIR and,
on PostgreSQL, a database named bench_refunds (dropped and created again).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from devtools.processes import CeleryProcess
from devtools.processes import wait_for as wait_for  # the scripts import it from here

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_RESULTS_DIR") or ROOT / "bench" / "results")
PG_BASE = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")
PG_DB = os.environ.get("BENCH_PG_DB", "bench_refunds")  # a database the run may drop
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")  # its own db number
PACKAGES = [
    "django",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "celery",
    "kombu",
    "redis",
    "psycopg",
    "psycopg-pool",
]

_started = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - _started:7.1f}s] {text}", flush=True)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def fresh_postgres_db(name: str = PG_DB) -> str:
    import psycopg

    with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{PG_BASE}/{name}"


def drop_postgres_db(name: str = PG_DB) -> None:
    import psycopg

    with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_client(url: str):
    import redis

    if url.startswith("redis+socket://"):
        return redis.Redis(unix_socket_path=url.removeprefix("redis+socket://"))
    return redis.Redis.from_url(url)


def machine() -> dict:
    info: dict = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "packages": {},
    }
    for name in PACKAGES:
        try:
            info["packages"][name] = version(name)
        except PackageNotFoundError:
            pass
    try:
        info["cpu_model"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
        info["memory_gb"] = round(mem_kb / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        pass
    try:
        import psycopg

        with psycopg.connect(f"{PG_BASE}/postgres", connect_timeout=3) as conn:
            info["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
    except Exception:  # noqa: BLE001 - optional detail
        pass
    try:
        info["redis"] = redis_client(REDIS_URL).info()["redis_version"]
    except Exception:  # noqa: BLE001 - optional detail
        pass
    return info


def write_results(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    (RESULTS / f"{name}-latest.json").write_text(path.read_text())
    return path


def group_cpu_seconds(workers) -> float:
    """CPU time (user + system) used so far by the worker processes: each worker runs in its own
    process group (main process and pool children), read from /proc. Measured on the workers,
    so the figure is the system's, not the benchmark driver's polling."""
    tick = os.sysconf("SC_CLK_TCK")
    groups = {w.proc.pid for w in workers if w.proc is not None}
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state; pgrp is field 5 of stat (index 2 here), utime/stime 14/15,
        # and cutime/cstime 16/17 count children that already exited (a recycled pool child).
        if int(fields[2]) in groups:
            total += sum(int(v) for v in fields[11:15])
    return total / tick


def start_workers(app: str, count: int, log_dir: Path, env: dict[str, str], prefix: str):
    workers = [
        CeleryProcess.worker(f"{prefix}{n}", log_dir, env, app=app).start()
        for n in range(1, count + 1)
    ]
    for worker in workers:
        worker.wait_ready()
    return workers


def prepare_environment(backend: str, data_dir: Path, **extra: str) -> None:
    """Point this process at a fresh data folder (and a fresh PostgreSQL database)."""
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CHECKPOINT_URL", "REFUNDS_CRASH_PLAN"):
        os.environ.pop(name, None)
    os.environ.update(
        {"DJANGO_SETTINGS_MODULE": "config.settings", "REFUNDS_DATA_DIR": str(data_dir), **extra}
    )
    # DEBUG is off outside the demo, which needs a key (a throwaway one: bench data only).
    os.environ.setdefault("SECRET_KEY", "bench-only-" + "b" * 50)
    # The figures are the desk's own: a gateway and mail kept in memory, which production refuses
    # unless an operator allows them (as a staging box would).
    os.environ.setdefault("REFUNDS_ALLOW_FAKES", "true")
    # A reviewer's few seconds to undo a decision are a person's time, not the desk's work: the
    # figures apply each decision at once, as the tests do.
    os.environ.setdefault("REFUNDS_UNDO_SECONDS", "0")
    if backend == "postgres":
        os.environ["DATABASE_URL"] = fresh_postgres_db()
