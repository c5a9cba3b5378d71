"""Start the whole desk on this machine: embedded Redis, three Celery workers (threads, intake
and housekeeping), Celery beat, the web server (gunicorn, static files by WhiteNoise: what
production runs, not the dev server) and the events process (uvicorn: the queue's doorbell, on
the next port). Ctrl-C stops all of them.

The Procfile's processes, on one machine, plus the embedded broker. A hand-written supervisor
rather than honcho: it starts the broker first and waits until it answers, starts again a process
that dies (honcho stops everything, and the browser then met "connection refused" because beat
had exited), and is one file with no extra dependency."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

from django.conf import settings
from django.core.management.base import BaseCommand

from devtools import embedded_redis


class Command(BaseCommand):
    help = "Run web, three workers, beat (and the embedded broker unless CELERY_BROKER_URL is set)."

    def add_arguments(self, parser):
        # Where the web server listens: --addr, else WEB_BIND and PORT as for the Procfile's web.
        default = f"{os.environ.get('WEB_BIND', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
        parser.add_argument("--addr", default=default)
        # The events process: EVENTS_BIND and EVENTS_PORT as for the Procfile's events, else
        # the web's port plus one.
        parser.add_argument("--events-addr", default="")
        parser.add_argument("--concurrency", type=int, default=2)
        parser.add_argument("--web-workers", type=int, default=2)

    def handle(
        self, *args, addr: str, events_addr: str, concurrency: int, web_workers: int, **options
    ):
        procs: list[Child] = []
        # No proxy here: the page opens the events process's own port, with its session cookie
        # (a cookie's host has no port); that process lets the web's origin read (CORS).
        if not events_addr:
            port = os.environ.get("EVENTS_PORT") or str(int(addr.rpartition(":")[2]) + 1)
            events_addr = f"{os.environ.get('EVENTS_BIND', '127.0.0.1')}:{port}"
        web_host, events_host = _browsed(addr), _browsed(events_addr)
        events_port = events_addr.rpartition(":")[2]
        os.environ.setdefault(
            "REFUNDS_EVENTS_URL", f"http://{events_host}:{events_port}/queue/events/"
        )
        os.environ.setdefault(
            "REFUNDS_EVENTS_ORIGINS", f"http://{web_host}:{addr.rpartition(':')[2]}"
        )
        # Counts of processes that are gone would be summed forever: a fresh start, fresh files.
        shutil.rmtree(settings.PROMETHEUS_MULTIPROC_DIR, ignore_errors=True)
        settings.PROMETHEUS_MULTIPROC_DIR.mkdir(parents=True, exist_ok=True)
        if settings.USES_EMBEDDED_BROKER:
            if embedded_redis.is_running(settings.EMBEDDED_REDIS_SOCKET):
                self.stdout.write("Embedded Redis already running; using it.")
            else:
                procs.append(Child("redis", embedded_redis.start, settings.EMBEDDED_REDIS_SOCKET))
        celery = [sys.executable, "-m", "celery", "-A", "config"]
        # The Procfile's worker lines: advances on `threads`, customers' messages on `intake`
        # (a slow read never holds a refund back), the sweeps, timers, webhooks and resends on
        # `housekeeping`, so a backlog of advances never holds a sweep back.
        workers = (
            ("worker", "threads", concurrency),
            ("intake", "intake", 1),
            ("housekeeping", "housekeeping", 1),
        )
        for name, queue, children in workers:
            worker = [*celery, "worker", "-Q", queue, "-n", f"{queue}@{socket.gethostname()}"]
            worker += ["-l", "warning"]
            procs.append(Child(name, subprocess.Popen, [*worker, "--concurrency", str(children)]))
        # RedBeat keeps the schedule and its one-beat lock in the broker's Redis, not a file.
        procs.append(Child("beat", subprocess.Popen, [*celery, "beat", "-l", "warning"]))
        gunicorn = [sys.executable, "-m", "gunicorn", "config.wsgi", "-c", "python:config.gunicorn"]
        gunicorn += [
            "--bind",
            addr,
            "--workers",
            str(web_workers),
            "--log-level",
            "warning",
        ]
        web = Child("web", subprocess.Popen, gunicorn)
        procs.append(web)
        events_env = os.environ | {
            "EVENTS_BIND": events_addr.rpartition(":")[0],
            "EVENTS_PORT": events_port,
            "EVENTS_LOG_LEVEL": "warning",
        }
        events = [sys.executable, "-m", "config.events"]
        procs.append(Child("events", functools.partial(subprocess.Popen, env=events_env), events))
        if not _serving(addr, web.proc, timeout=60):
            code = web.proc.poll()
            why = f"exited with {code}" if code is not None else "did not answer"
            self.stderr.write(f"The web server on {addr} {why} (within 60 s); stopping.")
            _stop_all(procs)
            sys.exit(1)
        names = [f"{queue}@{socket.gethostname()}" for _, queue, _ in workers]
        self.stdout.write("Waiting for the workers to take tasks...")
        late = _unanswered(names, timeout=120)
        taking = [name.partition("@")[0] for name in names if name not in late]
        if taking:
            self.stdout.write(f"Workers taking tasks: {', '.join(sorted(taking))}.")
        if late:
            self.stderr.write(
                f"{', '.join(late)} did not answer within 120 s: pages work, but tickets and "
                "messages wait until it does."
            )
        mode = (
            "THE DEMO: demo users, console mail, DEBUG on. Not for real customers.\n"
            "Log in as agent, manager or admin, password 'refund-demo'.\n"
            "Demo orders: 1042 ($6.99, late), 1043 (on time), 1045 ($48.00, late: manager).\n"
            if settings.DEMO
            else "Production mode (DEBUG off): log in with the users you created.\n"
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"\nRefund Desk is running at http://{addr}/ (gunicorn, WhiteNoise)\n{mode}"
                "Ctrl-C stops everything.\n"
            )
        )
        stop = False

        def _stop(*_):
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, _stop)
        try:
            while not stop:
                for child in procs:
                    child.keep_running(self.stderr.write)
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:  # also when a process cannot be started again (the broker's socket taken)
            _stop_all(procs)


def _browsed(addr: str) -> str:
    """The host a browser on this machine opens for a server bound to `addr` (host:port)."""
    host = addr.rpartition(":")[0]
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)


def _serving(addr: str, web: subprocess.Popen, *, timeout: float) -> bool:
    """Wait until the web server accepts connections on `addr` (host:port), so "running at" is
    said only once a browser can open the page; False if it exits or the time runs out. Another
    form of bind (a unix socket) is not waited for."""
    host, _, port = addr.rpartition(":")
    if not port.isdigit():
        return True
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "::1"}.get(host, host.strip("[]"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and web.poll() is None:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _unanswered(names: list[str], *, timeout: float) -> list[str]:
    """Ping the workers until each answers (its pool takes tasks), so "running" is said once a
    ticket opened at once is worked on; the names still silent when the time runs out."""
    from celery import current_app as app  # the project's app, set up with Django (config)

    waiting = set(names)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for reply in app.control.ping(destination=sorted(waiting), timeout=1.0) or []:
            waiting -= set(reply)
    return sorted(waiting)


def _stop_all(procs: list[Child]) -> None:
    for child in reversed(procs):
        if child.proc.poll() is None:
            child.proc.terminate()
    for child in procs:
        try:
            child.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.proc.kill()


class Child:
    """One of the desk's processes, started again when it dies. One that keeps dying young (a bad
    setting, a port in use) waits longer each time, up to 30 s, instead of restarting in a loop."""

    def __init__(self, name: str, start: Callable[..., subprocess.Popen], *args) -> None:
        self.name, self._start, self._args = name, start, args
        self._pause = 0.0
        self._due: float | None = None
        self.proc = start(*args)
        self._started = time.monotonic()

    def keep_running(self, say: Callable[[str], None]) -> None:
        code = self.proc.poll()
        if code is None:
            return
        now = time.monotonic()
        if self._due is None:
            young = now - self._started < 60
            self._pause = min(max(self._pause * 2, 1.0), 30.0) if young else 1.0
            self._due = now + self._pause
            say(f"{self.name} exited with {code}; starting it again in {self._pause:g} s.")
        elif now >= self._due:
            self._due = None
            self.proc = self._start(*self._args)
            self._started = now
