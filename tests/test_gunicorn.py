"""The Procfile's web process, a real gunicorn with config/gunicorn.py: bound to 127.0.0.1 by
default, JSON access lines with no customer's address, the app loaded before the workers fork,
and metrics files of processes that stopped removed at start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from devtools.processes import ROOT, wait_for
from devtools.smtp_sink import free_port

pytestmark = pytest.mark.slow


def a_dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def instance_env(data: Path, **more: str) -> dict[str, str]:
    """The environment of a web process whose data folder is `data`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REFUNDS_", "DEBUG", "PROMETHEUS_", "WEB_"))
    }
    return env | {
        "SECRET_KEY": "gunicorn-test",
        "REFUNDS_DATA_DIR": str(data),
        "REFUNDS_ALLOW_FAKES": "true",  # a staging box: its console mail is not what is tested
        **more,
    }


@pytest.fixture
def web(tmp_path: Path):
    port = free_port()
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    dead, alive = a_dead_pid(), os.getpid()
    (metrics / f"counter_{dead}.db").write_bytes(b"")
    (metrics / f"counter_{alive}.db").write_bytes(b"")
    out = (tmp_path / "web.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "-c", "python:config.gunicorn"],
        cwd=ROOT,
        env=instance_env(tmp_path, PORT=str(port), WEB_CONCURRENCY="1"),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log = tmp_path / "web.log"
    try:
        wait_for(lambda: "Booting worker" in log.read_text(), timeout=120, what="gunicorn up")
        yield {
            "port": port,
            "log": log,
            "metrics": metrics,
            "dead": dead,
            "alive": alive,
            "master": proc.pid,
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()


def test_the_web_process_as_the_procfile_runs_it(web):
    log: Path = web["log"]
    assert f"Listening at: http://127.0.0.1:{web['port']}" in log.read_text()

    # The app (LangGraph and its native parts included) is loaded in the master before the fork,
    # so no worker pays for the imports on its first request.
    master_maps = Path(f"/proc/{web['master']}/maps").read_text()
    assert "ormsgpack" in master_maps and "pydantic_core" in master_maps

    base = f"http://127.0.0.1:{web['port']}"
    assert requests.get(f"{base}/login/", timeout=60).status_code == 200

    requests.get(f"{base}/customers/ana@example.com/", timeout=30, allow_redirects=False)
    requests.get(f"{base}/login/?next=/customers/bo%40example.com/", timeout=30)
    wait_for(lambda: log.read_text().count('"gunicorn.access"') >= 3, timeout=10, what="lines")
    lines = [json.loads(x) for x in log.read_text().splitlines() if '"gunicorn.access"' in x]
    assert [x["path"] for x in lines[:2]] == ["/login/", "/customers/***@…/"]
    assert all(x["request_id"] and x["status"] for x in lines)
    text = log.read_text()
    assert "ana@example.com" not in text and "bo%40example.com" not in text

    assert not (web["metrics"] / f"counter_{web['dead']}.db").exists()
    assert (web["metrics"] / f"counter_{web['alive']}.db").exists()
    # gunicornc's, in its own data folder; the master opens it on a thread of its own.
    wait_for(lambda: (log.parent / "gunicorn.ctl").is_socket(), timeout=30, what="its socket")


# gunicorn's settings as it reads them from config/gunicorn.py (`-c python:config.gunicorn`).
CONTROL_SOCKET = """
from gunicorn.app.base import Application
class Web(Application):
    def load_config(self):
        self.load_config_from_module_name_or_filename("python:config.gunicorn")
    def load(self):
        pass
print(Web().cfg.control_socket)
"""


def test_each_instance_has_its_own_control_socket_in_its_data_folder(tmp_path):
    for data in (tmp_path / "one", tmp_path / "two"):
        shown = subprocess.run(
            [sys.executable, "-c", CONTROL_SOCKET],
            cwd=ROOT,
            env=instance_env(data),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.stdout.splitlines() == [str(data / "gunicorn.ctl")], shown.stderr
