"""gunicorn's settings for the web process (`-c python:config.gunicorn`): bound to 127.0.0.1
unless WEB_BIND says otherwise (the TLS proxy in front is the only way in); the app and every
view module loaded before the workers fork, so a fresh worker's first request pays no imports."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from gunicorn import glogging

bind = [f"{os.environ.get('WEB_BIND', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"]
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
preload_app = True
accesslog = "-"
# gunicorn's default is one per user: each gunicorn started takes it from the last.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
control_socket = str(settings.DATA_DIR / "gunicorn.ctl")


class AccessLogger(glogging.Logger):
    def access(self, resp: Any, req: Any, environ: dict, request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        from core.logs import access_line

        atoms = self.atoms(resp, req, environ, request_time)
        self.access_log.info(access_line(atoms, words=settings.LOG_FORMAT == "text"))


logger_class = AccessLogger


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_metric_files(folder: Path) -> list[str]:
    """A dead pid's <kind>_<pid>.db would be summed into /metrics for ever."""
    removed = []
    for path in folder.glob("*.db"):
        pid = path.stem.rpartition("_")[2]
        if pid.isdigit() and not _pid_alive(int(pid)):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def when_ready(server: Any) -> None:
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports every view (and what they import) now
    removed = remove_dead_metric_files(Path(settings.PROMETHEUS_MULTIPROC_DIR))
    server.log.info("metrics files of stopped processes removed: %d", len(removed))


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
