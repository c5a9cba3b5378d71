"""Start the whole desk on this machine: embedded Redis, a Celery worker, Celery beat and the
web server. Ctrl-C stops all of them."""

import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from refunds.devtools import embedded_redis


class Command(BaseCommand):
    help = "Run web, worker and beat (and the embedded broker unless CELERY_BROKER_URL is set)."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000")
        parser.add_argument("--concurrency", type=int, default=2)

    def handle(self, *args, addr: str, concurrency: int, **options):
        procs: list[tuple[str, subprocess.Popen]] = []
        if settings.USES_EMBEDDED_BROKER:
            if embedded_redis.is_running(settings.EMBEDDED_REDIS_SOCKET):
                self.stdout.write("Embedded Redis already running; using it.")
            else:
                procs.append(("redis", embedded_redis.start(settings.EMBEDDED_REDIS_SOCKET)))
        celery = [sys.executable, "-m", "celery", "-A", "config"]
        procs.append(
            (
                "worker",
                subprocess.Popen(
                    [
                        *celery,
                        "worker",
                        "-l",
                        "warning",
                        "--concurrency",
                        str(concurrency),
                        "-n",
                        "desk@%h",
                    ]
                ),
            )
        )
        procs.append(
            (
                "beat",
                subprocess.Popen(
                    [
                        *celery,
                        "beat",
                        "-l",
                        "warning",
                        "--schedule",
                        str(settings.DATA_DIR / "celerybeat-schedule"),
                    ]
                ),
            )
        )
        procs.append(
            (
                "web",
                subprocess.Popen([sys.executable, "manage.py", "runserver", addr, "--noreload"]),
            )
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"\nRefund Desk is running at http://{addr}/\n"
                "Log in as agent, manager or admin, password 'refund-demo' (demo use only).\n"
                "Demo orders: 1042 ($6.99, late), 1043 (on time), 1045 ($48.00, late: manager).\n"
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
                for name, proc in procs:
                    if proc.poll() is not None:
                        self.stderr.write(f"{name} exited with {proc.returncode}; stopping.")
                        stop = True
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        for _, proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
