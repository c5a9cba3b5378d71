"""`manage.py rundesk` (what `bin/run` ends in): it says the desk is running only once the web
server answers, so the first page a new user opens is not "connection refused", and it starts
again a process that dies instead of stopping the desk."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.processes import ROOT, wait_for
from devtools.smtp_sink import free_port
from tests.test_settings import manage_check


def children(pid: int) -> dict[int, str]:
    """The processes `pid` started (pid -> command line), read from /proc."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
            if parent == pid:
                found[int(stat.parent.name)] = (stat.parent / "cmdline").read_text()
        except (OSError, ValueError):
            continue  # gone meanwhile
    return found


class Desk:
    """`manage.py rundesk` in its own session, with every line it said."""

    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc, self.port = proc, port
        self.said: list[str] = []
        self.running = threading.Event()

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.said.append(line)
            if "is running at" in line:
                # At once, as a person who reads the line would: the port must already answer.
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    self.said.append("ACCEPTED\n")
                except OSError as exc:
                    self.said.append(f"REFUSED {exc}\n")
                self.running.set()

    def beat(self) -> int | None:
        return next(
            (pid for pid, cmd in children(self.proc.pid).items() if "\0beat\0" in cmd), None
        )


@pytest.fixture
def desk(tmp_path) -> Iterator[Desk]:
    assert manage_check(tmp_path, "migrate", "--noinput", "-v0").returncode == 0
    port = free_port()
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REFUNDS_", "CELERY_", "DATABASE_URL", "CHECKPOINT_URL"))
        and k not in ("DEBUG", "SECRET_KEY", "PROMETHEUS_MULTIPROC_DIR")
    }
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "rundesk", "--addr", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**clean, "REFUNDS_DATA_DIR": str(tmp_path), "REFUNDS_DEMO": "true"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    started = Desk(proc, port)
    threading.Thread(target=started.read, daemon=True).start()
    try:
        yield started
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.slow
def test_running_at_is_said_once_the_web_server_accepts(desk):
    wait_for(desk.running.is_set, timeout=120, what="rundesk to say it is running")
    assert "ACCEPTED\n" in desk.said, "".join(desk.said)


@pytest.mark.slow
def test_a_process_that_dies_is_started_again_and_the_desk_keeps_running(desk):
    """The demo's beat exited, rundesk stopped everything with it ("beat exited with 1;
    stopping.") and the browser met "connection refused"."""
    wait_for(desk.running.is_set, timeout=120, what="rundesk to say it is running")
    first = wait_for(desk.beat, timeout=30, what="beat to run")
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: desk.beat() not in (None, first), timeout=30, what="beat to be started again")
    assert any("beat exited with -9; starting it again" in line for line in desk.said), desk.said
    assert desk.proc.poll() is None
    socket.create_connection(("127.0.0.1", desk.port), timeout=5).close()
