"""Loaded before Django (`-p tests.environment` in pyproject.toml): tests run as production does,
DEBUG off, so they need a SECRET_KEY; worker processes the tests start inherit it.

Under pytest-xdist (bin/test runs three pytest processes) each one gets a data folder of its own
(SQLite files, the embedded broker's socket, the checkpoints, the metrics) and, on a configured
Redis, a database number of its own: a test's broker flush or SQLite file never touches
another's.
pytest-django gives each its own test database (`..._gw0`, `..._gw1`)."""

import os
import re
from pathlib import Path

os.environ.setdefault("SECRET_KEY", "tests-only-" + "k" * 50)
# The tests use fakes on purpose (locmem and console mail, the demo gateway) without the demo.
os.environ.setdefault("REFUNDS_ALLOW_FAKES", "true")
# Decisions apply at once, as before the undo grace; the tests of the grace set it themselves.
os.environ.setdefault("REFUNDS_UNDO_SECONDS", "0")


def _per_worker(worker: str) -> None:
    """This pytest process's own data and metrics folders and Redis database (`worker` is "gw0",
    "gw1"...)."""
    number = int(worker.removeprefix("gw"))
    base = os.environ.get("REFUNDS_DATA_DIR") or str(Path(__file__).parent.parent / "var" / "test")
    os.environ["REFUNDS_DATA_DIR"] = str(Path(base) / worker)
    # The controller's settings put its own metrics folder in the environment: each process
    # (and the workers it starts) counts in its own, or one's /metrics sees the other's refunds.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(Path(base) / worker / "metrics")
    broker = os.environ.get("CELERY_BROKER_URL", "")
    found = re.fullmatch(r"(redis://[^/]+)/(\d+)", broker)
    if found:  # Redis has 16 numbered databases: the next ones up, wrapping round
        os.environ["CELERY_BROKER_URL"] = f"{found[1]}/{(int(found[2]) + number) % 16}"
    elif broker:
        raise RuntimeError(
            f"CELERY_BROKER_URL={broker!r}: the tests need a redis://host:port/<number> URL to "
            "give each of bin/test's pytest processes a database of its own (or run with -n 0)"
        )


if os.environ.get("PYTEST_XDIST_WORKER"):
    _per_worker(os.environ["PYTEST_XDIST_WORKER"])
