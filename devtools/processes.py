"""Start and kill real Celery processes: used by crashtest, the benchmarks and the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class CeleryProcess:
    """`celery worker` or `celery beat` in its own session, so a kill takes its children too."""

    def __init__(
        self, args: list[str], log: Path, env: dict[str, str], name: str = "", app: str = "config"
    ):
        self.args, self.log, self.env, self.app = args, log, env, app
        self.name = name or log.stem
        self.proc: subprocess.Popen | None = None
        self._log_offset = 0
        self._ready = False

    @classmethod
    def worker(
        cls,
        name: str,
        log_dir: Path,
        env: dict[str, str],
        *,
        pool: str = "prefork",
        concurrency: int = 1,
        app: str = "config",
        queues: str = "",
    ) -> CeleryProcess:
        """`queues` as for -Q ("threads", "intake", "housekeeping"); empty: every queue the app
        declares, so a test's single worker advances threads, reads messages and runs the
        sweeps."""
        args = [
            "worker",
            "-l",
            "info",
            "-P",
            pool,
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *(["-Q", queues] if queues else []),
        ]
        return cls(args, log_dir / f"{name}.log", env, name=name, app=app)

    @classmethod
    def beat(cls, log_dir: Path, env: dict[str, str]) -> CeleryProcess:
        args = ["beat", "-l", "info", "--schedule", str(log_dir / "beat-schedule")]
        return cls(args, log_dir / "beat.log", env)

    def start(self, *, wait_ready: bool = False, timeout: float = 60) -> CeleryProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log.stat().st_size if self.log.exists() else 0
        self._ready = False
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", self.app, *self.args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def is_ready(self) -> bool:
        """Whether this start logged its "ready." line and still runs (a restarted worker
        appends to the same log): its pool is up and takes tasks. Does not wait."""
        if not self._ready and self.proc is not None:
            with self.log.open("rb") as log:
                log.seek(self._log_offset)
                self._ready = b"ready." in log.read()
        return self._ready and self.alive

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait for this start's "ready." line."""
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if not self.alive:
                raise RuntimeError(f"{self.log.name} exited:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.log.name} not ready in {timeout}s")
            time.sleep(0.05)

    def errors(self) -> int:
        """Tracebacks and ERROR lines this process logged."""
        text = self.output()
        return text.count("Traceback") + text.count("] ERROR")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the whole process group: main process and pool children, no cleanup."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def signal(self, sig: int) -> None:
        """Send a signal to the whole process group (SIGSTOP, SIGCONT) without waiting."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 20) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
                return
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def wait_for(predicate, *, timeout: float = 30, every: float = 0.1, what: str = "condition"):
    """Poll predicate until it returns something true; return it, or fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
