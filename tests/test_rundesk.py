"""`manage.py rundesk` (what `bin/run` ends in): it says the desk is running only once the web
server answers, so the first page a new user opens is not "connection refused"."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from devtools.processes import ROOT, wait_for
from devtools.smtp_sink import free_port
from tests.test_settings import manage_check


@pytest.mark.slow
def test_running_at_is_said_once_the_web_server_accepts(tmp_path):
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
    said: list[str] = []
    running = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line)
            if "is running at" in line:
                # At once, as a person who reads the line would: the port must already answer.
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    said.append("ACCEPTED\n")
                except OSError as exc:
                    said.append(f"REFUSED {exc}\n")
                running.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_for(running.is_set, timeout=120, what="rundesk to say it is running")
        assert "ACCEPTED\n" in said, "".join(said)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
