"""gunicorn's settings for the web process (Procfile, `manage.py rundesk`):
`-c python:config.gunicorn`.

- Bound to the proxy's side: 127.0.0.1 unless WEB_BIND says otherwise (the TLS proxy in front is
  the only way in). gunicorn believes X-Forwarded-Proto/-For only from FORWARDED_ALLOW_IPS (its
  own variable; default 127.0.0.1 and ::1, the proxy on this machine).
- The app is loaded once in the master before the workers fork (preload), and every view module
  imported then, so a fresh worker's first request does not pay for the imports (21-24 s before,
  on a busy machine).
- One access line per request, with the request id and no customer's address
  (core.logs.access_line): JSON, or words for a person at a terminal with LOG_FORMAT=text (the
  demo's console).
- Prometheus' multiprocess files of processes that no longer run are removed at start, and a
  worker's when it exits, so /metrics does not sum the dead.
- gunicornc's control socket is the instance's own, in its data folder (REFUNDS_DATA_DIR)."""

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
# gunicorn's default ($XDG_RUNTIME_DIR or ~/.gunicorn) is one per user: each gunicorn they start
# takes it from the last, each that stops deletes it, and gunicornc stops whichever holds it.
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
    """prometheus_client names each process's file <kind>_<pid>.db; a dead pid's counts would be
    summed into /metrics for ever. Files of live processes (workers, beat) are kept."""
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
