"""/healthz and /readyz. Each check in its own thread, so a hung PostgreSQL or Redis still
answers in READYZ_TIMEOUT_SECONDS; only admins see which failed."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from core.masking import mask
from refunds import permissions, persistence
from refunds.models import SweepRun
from refunds.services import RECOVERY_SWEEP


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def check_checkpoints() -> None:
    persistence.checkpointer().get_tuple({"configurable": {"thread_id": "readyz"}})


def check_broker() -> None:
    from kombu import Connection

    timeout = settings.READYZ_TIMEOUT_SECONDS
    options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    with Connection(
        settings.CELERY_BROKER_URL, connect_timeout=timeout, transport_options=options
    ) as conn:
        conn.ensure_connection(
            max_retries=1,
            interval_start=0,
            interval_step=0,
            # kombu adds the timeout to time.time(), so a float works; its stubs say int.
            timeout=timeout,  # type: ignore[arg-type]
        )  # on Redis, kombu's channel sends a PING: a round trip, not only an open socket


class ScheduleStopped(Exception):
    pass


def check_schedule() -> None:
    ran_at = SweepRun.objects.filter(name=RECOVERY_SWEEP).values_list("ran_at", flat=True)
    last = ran_at.first()
    late = settings.READYZ_SWEEP_LATE_SECONDS
    if last is None:
        raise ScheduleStopped("the recovery sweep has never run (is beat running?)")
    ago = (timezone.now() - last).total_seconds()
    if ago > late:
        raise ScheduleStopped(
            f"the recovery sweep last ran {ago:.0f} s ago, over {late:g} s (is beat running?)"
        )


CHECKS = {
    "database": check_database,
    "checkpoints": check_checkpoints,
    "broker": check_broker,
    "schedule": check_schedule,
}


def timed(check: Callable[[], None]) -> dict[str, Any]:
    started = time.monotonic()
    try:
        check()
        result: dict[str, Any] = {"ok": True}
    except Exception as exc:  # noqa: BLE001 - a health check reports, it does not raise
        first = (str(exc).strip().splitlines() or [""])[0]
        result = {"ok": False, "error": mask(f"{type(exc).__name__}: {first}")[:300]}
    finally:
        connection.close()  # the pool thread's own connection, if the check opened one
    return result | {"ms": round((time.monotonic() - started) * 1000)}


def run_checks() -> dict[str, dict[str, Any]]:
    timeout = settings.READYZ_TIMEOUT_SECONDS
    pool = ThreadPoolExecutor(max_workers=len(CHECKS), thread_name_prefix="readyz")
    futures = {name: pool.submit(timed, check) for name, check in CHECKS.items()}
    wait(futures.values(), timeout=timeout)
    pool.shutdown(wait=False, cancel_futures=True)  # a hung check finishes in its own time
    late = {"ok": False, "error": f"no answer in {timeout:g} s", "ms": round(timeout * 1000)}
    return {name: future.result() if future.done() else late for name, future in futures.items()}


def _is_admin(request: HttpRequest) -> bool:
    try:
        return permissions.is_admin(request.user)
    except Exception:  # noqa: BLE001 - the session lives in the database, which may be down
        return False


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    results = run_checks()
    ready = all(r["ok"] for r in results.values())
    answer: dict[str, Any] = {"status": "ok" if ready else "unavailable"}
    if _is_admin(request):
        answer["checks"] = results
    return JsonResponse(answer, status=200 if ready else 503)
