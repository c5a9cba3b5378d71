"""/healthz says the process lives and nothing more; /readyz checks the database, the checkpoint
store, the broker and that the schedule ticks, each with a short timeout, and tells only admins
which one failed."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from refunds import health, persistence, services
from refunds.models import SweepRun
from refunds.tasks import recover_tickets


def test_healthz_answers_ok_with_no_details(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_healthz_does_not_touch_the_database(client, db, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert client.get("/healthz").status_code == 200


@pytest.fixture(autouse=True)
def patient(settings):
    """Checks that answer get time to answer on a loaded host (CI's 2 cores ran the PostgreSQL
    checks past the 1 s default once); the tests of the timeout set their own."""
    settings.READYZ_TIMEOUT_SECONDS = 10.0


@pytest.fixture
def broker_up(monkeypatch):
    monkeypatch.setitem(health.CHECKS, "broker", lambda: None)
    monkeypatch.setitem(health.CHECKS, "schedule", lambda: None)


def test_readyz_answers_200_when_everything_answers(client, db, broker_up):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}  # no details for an anonymous caller


def test_readyz_shows_admins_each_check(client, admin_user, broker_up):
    client.force_login(admin_user)
    checks = client.get("/readyz").json()["checks"]
    assert {name: c["ok"] for name, c in checks.items()} == {
        "database": True,
        "checkpoints": True,
        "broker": True,
        "schedule": True,
    }


def test_readyz_answers_503_without_details_when_the_checkpoints_fail(
    client, db, monkeypatch, broker_up
):
    def broken():
        raise OSError("unable to open database file at postgres://u:hunter22@db/x")

    monkeypatch.setattr(persistence, "checkpointer", broken)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable"}
    assert b"hunter22" not in response.content and b"unable" not in response.content


def test_readyz_tells_admins_why_with_secrets_masked(client, admin_user, monkeypatch, broker_up):
    def broken():
        raise OSError("could not connect to postgres://u:hunter22@db/x")

    monkeypatch.setattr(persistence, "checkpointer", broken)
    client.force_login(admin_user)
    response = client.get("/readyz")
    assert response.status_code == 503
    error = response.json()["checks"]["checkpoints"]["error"]
    assert error.startswith("OSError: could not connect to postgres://")
    assert "hunter22" not in error


def test_readyz_gives_up_on_a_check_that_hangs(client, db, monkeypatch, settings, broker_up):
    settings.READYZ_TIMEOUT_SECONDS = 0.5
    monkeypatch.setitem(health.CHECKS, "database", lambda: time.sleep(5))
    started = time.monotonic()
    response = client.get("/readyz")
    assert response.status_code == 503
    assert time.monotonic() - started < 1.5


def test_readyz_answers_503_within_3_s_when_the_broker_is_down(client, admin_user, settings):
    # A port nothing listens on: the broker refuses, as a stopped Redis does.
    from devtools.smtp_sink import free_port

    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    # The other checks have their whole budget on a loaded machine (CI on 2 cores once took
    # more than the default 1 s to open the checkpointer's pool); 2 s still answers within 3.
    settings.READYZ_TIMEOUT_SECONDS = 2.0
    health.check_checkpoints()  # the pool opened, as in a process that has served before
    client.force_login(admin_user)
    started = time.monotonic()
    response = client.get("/readyz")
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert elapsed < 3, elapsed
    checks = response.json()["checks"]
    assert checks["broker"]["ok"] is False
    assert checks["database"]["ok"] is True and checks["checkpoints"]["ok"] is True


def test_readyz_answers_503_within_3_s_when_the_broker_does_not_answer(client, db, settings):
    # A listening socket that never speaks: the check's own timeout has to end it.
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        settings.READYZ_TIMEOUT_SECONDS = 1.0  # the default
        started = time.monotonic()
        response = client.get("/readyz")
        assert response.status_code == 503
        assert time.monotonic() - started < 3
    finally:
        silent.close()


def test_the_broker_check_fails_on_a_broker_that_accepts_and_never_answers(settings):
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
    settings.READYZ_TIMEOUT_SECONDS = 0.5
    try:
        result = health.timed(health.check_broker)
    finally:
        silent.close()
    assert result["ok"] is False, result  # an open socket is not a broker: it has to answer


@pytest.mark.parametrize("url", ["/healthz", "/readyz"])
@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_health_rejects_other_methods(client, db, url, method):
    assert getattr(client, method)(url).status_code == 405


# --- the schedule: a beat that stopped (the sweep, the timers, the webhooks with it) ------------
def test_the_recovery_sweep_says_when_it_ran(transactional_db):
    recover_tickets()
    ran_at = SweepRun.objects.get(name=services.RECOVERY_SWEEP).ran_at
    assert timezone.now() - ran_at < timedelta(seconds=30)
    health.check_schedule()


def test_readyz_answers_503_and_names_the_schedule_when_the_sweep_stopped(
    client, admin_user, monkeypatch, settings, transactional_db
):
    """Beat exited and nothing swept for 25 minutes while /readyz said ok."""
    monkeypatch.setitem(health.CHECKS, "broker", lambda: None)
    settings.READYZ_SWEEP_LATE_SECONDS = 120
    SweepRun.objects.create(
        name=services.RECOVERY_SWEEP, ran_at=timezone.now() - timedelta(minutes=25)
    )
    client.force_login(admin_user)
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["schedule"]["ok"] is False
    assert re.match(  # 1500 s, or a second more on a loaded machine
        r"ScheduleStopped: the recovery sweep last ran 150[0-9] s ago, over 120 s",
        checks["schedule"]["error"],
    )
    assert all(checks[name]["ok"] for name in ("database", "checkpoints", "broker"))


def test_readyz_answers_503_when_no_sweep_ever_ran(client, admin_user, monkeypatch):
    monkeypatch.setitem(health.CHECKS, "broker", lambda: None)
    client.force_login(admin_user)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "never run" in response.json()["checks"]["schedule"]["error"]


def test_readyz_answers_200_while_the_sweep_runs(client, transactional_db, monkeypatch):
    monkeypatch.setitem(health.CHECKS, "broker", lambda: None)
    recover_tickets()
    assert client.get("/readyz").status_code == 200
