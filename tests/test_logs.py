"""What the console shows (config/settings.py LOGGING, core/logs.py): each record once, and a
refusal (a 4xx the desk answers on purpose) as one line with its words, no traceback."""

from __future__ import annotations

from pathlib import Path

from django.core import mail
from django.test import Client
from django.urls import include, path

from tests.test_security import DB_PASSWORD, PRODUCTION, manage

# A view refusing someone, as Django's handler answers it (the same call every view's
# PermissionDenied goes through), in a process whose logging is configured as the web's.
REFUSE = (
    "from django.core.exceptions import PermissionDenied; "
    "from django.core.handlers.exception import response_for_exception; "
    "from django.test import RequestFactory; "
    "request = RequestFactory().post('/reviews/3/decide/'); "
    "response = response_for_exception("
    "request, PermissionDenied('Only a manager lowers an amount.')); "
    "print('answered', response.status_code)"
)


def test_a_refusal_is_one_line_on_the_demos_console(tmp_path: Path):
    done = manage(tmp_path, "shell", "-c", REFUSE, REFUNDS_DEMO="true")

    assert "answered 403" in done.stdout, done.stderr
    assert done.stderr.splitlines() == [
        "WARNING django.request Forbidden (Permission denied): /reviews/3/decide/: "
        "Only a manager lowers an amount."
    ]


def test_a_refusal_is_one_json_line_in_production_without_a_traceback(tmp_path: Path):
    done = manage(tmp_path, "shell", "-c", REFUSE, **PRODUCTION)

    assert "answered 403" in done.stdout, done.stderr
    [line] = done.stderr.splitlines()
    assert '"message": "Forbidden (Permission denied): /reviews/3/decide/: Only a manager' in line
    assert "Traceback" not in line and '"exception"' not in line


def test_a_500_still_emails_the_admins_with_its_traceback(db, settings):
    settings.ROOT_URLCONF = "tests.test_security"
    settings.ADMINS = [("Ops", "ops@example.com")]

    Client(raise_request_exception=False).get("/explode/")

    [sent] = mail.outbox
    assert sent.to == ["ops@example.com"]
    assert "Internal Server Error: /explode/" in sent.subject
    assert "Traceback" in sent.body


class Unprintable:
    def __repr__(self) -> str:  # as a half-made object's: its repr reads what is not there
        raise AttributeError("'NoneType' object has no attribute 'username'")


def _explode_beside_an_unprintable(request):
    row = Unprintable()  # noqa: F841 (a frame variable: the report reads each)
    dsn = f"postgres://refunds:{DB_PASSWORD}@db.internal:5432/refunds"
    raise RuntimeError(f"could not connect to {dsn}")


urlpatterns = [path("explode/", _explode_beside_an_unprintable), path("", include("config.urls"))]


def test_a_500_beside_a_value_whose_repr_fails_still_emails_the_admins_masked(db, settings):
    settings.ROOT_URLCONF = __name__
    settings.ADMINS = [("Ops", "ops@example.com")]

    answer = Client(raise_request_exception=False).get("/explode/")

    assert answer.status_code == 500
    [sent] = mail.outbox
    assert "in _explode_beside_an_unprintable" in sent.body  # its traceback
    assert "could not connect to postgres://********************@db.internal" in sent.body
    assert DB_PASSWORD not in sent.body
