"""Secure by default: production is not the demo, check --deploy is clean under production
variables, no error page or log line shows a credential, every page carries a strict CSP and a
Permissions-Policy, logins lock out, templates stay free of inline script and style, API keys are
kept hashed and shown once."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import include, path

from api.models import ApiToken, hash_token

ROOT = Path(__file__).resolve().parent.parent
DB_PASSWORD = "db-Pass-2741"
BROKER_PASSWORD = "broker-Pass-8812"
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "prod-" + "q8w7e6r5t4" * 6,
    "ALLOWED_HOSTS": "desk.example.com",
    "HTTPS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
    # Real mail and money: production refuses the fakes (console mail, the demo gateway).
    "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
    "REFUNDS_GATEWAY": "refunds.payments.HttpGateway",
    # Production encrypts checkpoints: a key (32 bytes, urlsafe base64) or it refuses to start.
    "REFUNDS_CHECKPOINT_KEYS": "dGVzdHMtb25seS1jaGVja3BvaW50LWtleS0zMi1ieXQ=",
}


def manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REFUNDS_", "CELERY_", "DATABASE_URL", "CHECKPOINT_URL"))
        and k not in ("DEBUG", "SECRET_KEY", "PROMETHEUS_MULTIPROC_DIR")
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "REFUNDS_DATA_DIR": str(tmp_path), **env},
    )


# --- production is not the demo -------------------------------------------------------------------
def test_check_deploy_is_clean_under_production_variables(tmp_path):
    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_names_what_is_missing_without_https(tmp_path):
    plain = {k: v for k, v in PRODUCTION.items() if k not in ("HTTPS", "SECURE_HSTS_PRELOAD")}
    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **plain)
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr


def test_no_demo_user_exists_in_production_mode(tmp_path):
    assert manage(tmp_path, "migrate", "--noinput", "-v0", **PRODUCTION).returncode == 0
    refused = manage(tmp_path, "demo_data", **PRODUCTION)
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        "CommandError: demo_data runs only in the demo (REFUNDS_DEMO=true, as bin/run sets); "
        "this is production, so no demo users are made."
    ]
    count = manage(
        tmp_path,
        "shell",
        "-c",
        "from django.contrib.auth.models import User; print(User.objects.count())",
        **PRODUCTION,
    )
    assert count.stdout.strip().splitlines()[-1] == "0", count.stderr


def test_the_demo_loads_its_users(tmp_path):
    demo = {"REFUNDS_DEMO": "true"}
    assert manage(tmp_path, "migrate", "--noinput", "-v0", **demo).returncode == 0
    done = manage(tmp_path, "demo_data", **demo)
    assert done.returncode == 0, done.stderr
    assert "users agent, manager, admin" in done.stdout


def test_the_demo_has_orders_for_a_shift_of_every_kind(tmp_path):
    demo = {"REFUNDS_DEMO": "true"}
    assert manage(tmp_path, "migrate", "--noinput", "-v0", **demo).returncode == 0
    assert manage(tmp_path, "demo_data", **demo).returncode == 0
    count = (
        "from django.db.models import F; from refunds.models import Order; "
        "late = Order.objects.filter(delivered_on__gt=F('promised_on')); "
        "print(Order.objects.count(), late.filter(shipping_fee_cents__lte=2000).count(), "
        "late.filter(shipping_fee_cents__gt=2000, shipping_fee_cents__lte=10000).count(), "
        "late.filter(shipping_fee_cents__gt=10000).count(), "
        "Order.objects.filter(delivered_on__lte=F('promised_on')).count(), "
        "Order.objects.values('customer_email').distinct().count())"
    )
    counted = manage(tmp_path, "shell", "-c", count, **demo)

    total, agent, manager, flagged, on_time, customers = map(
        int, counted.stdout.strip().splitlines()[-1].split()
    )
    assert total >= 40 and total == customers  # one customer per order: no repeat-refunder flags
    assert min(agent, manager, flagged, on_time) >= 8  # agent-sized, manager-sized, over $100


def test_debug_is_off_unless_asked_for():
    from django.conf import settings

    assert settings.DEMO is False and settings.DEBUG is False  # the tests run as production


# --- nothing secret on an error page --------------------------------------------------------------
def _explode(request):
    dsn = f"postgres://refunds:{DB_PASSWORD}@db.internal:5432/refunds"  # a frame variable
    raise RuntimeError(f"could not connect to {dsn}")


urlpatterns = [path("explode/", _explode), path("", include("config.urls"))]


@pytest.fixture
def secret_settings(settings, monkeypatch):
    settings.DEBUG = True  # the worst case: Django's technical pages
    settings.ROOT_URLCONF = __name__
    db_url = f"postgres://refunds:{DB_PASSWORD}@db.internal:5432/refunds"
    broker_url = f"redis://:{BROKER_PASSWORD}@redis.internal:6379/0"
    settings.DATABASE_URL = db_url
    settings.CELERY_BROKER_URL = broker_url
    settings.CHECKPOINT_URL = db_url
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("CELERY_BROKER_URL", broker_url)
    return settings


def assert_no_secrets(content: bytes) -> None:
    text = content.decode(errors="replace")
    for secret in (DB_PASSWORD, BROKER_PASSWORD):
        assert secret not in text, f"{secret} shown"


def test_a_forced_500_page_shows_no_credentials(db, secret_settings):
    client = Client(raise_request_exception=False)
    response = client.get("/explode/", HTTP_X_DATABASE_URL="postgres://u:" + DB_PASSWORD + "@x/y")
    assert response.status_code == 500
    assert b"RuntimeError" in response.content  # it is the debug page
    assert b"could not connect to postgres://" in response.content
    assert_no_secrets(response.content)


def test_a_400_from_too_many_form_fields_on_the_login_page_shows_no_credentials(
    db, secret_settings
):
    client = Client(raise_request_exception=False)
    fields = {f"field{i}": "x" for i in range(1100)}
    response = client.post("/login/", fields)
    assert response.status_code == 400
    assert_no_secrets(response.content)


def test_production_error_pages_are_plain(db, settings):
    settings.ROOT_URLCONF = __name__
    client = Client(raise_request_exception=False)
    response = client.get("/explode/")
    assert response.status_code == 500
    assert b"RuntimeError" not in response.content and b"Traceback" not in response.content


def test_log_lines_are_json_with_request_id_and_masked(db, settings, capsys):
    settings.ROOT_URLCONF = __name__
    from core.logs import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        Client(raise_request_exception=False).get("/explode/", HTTP_X_REQUEST_ID="req-42")
    finally:
        logger.removeHandler(handler)
    lines = [
        json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")
    ]
    error = next(line for line in lines if line["level"] == "error" and "exception" in line)
    assert error["request_id"] == "req-42"
    assert DB_PASSWORD not in json.dumps(lines)
    assert "postgres://********************@db.internal" in error["exception"]


def test_the_runner_logs_carry_ticket_and_thread_ids(db, late_order, caplog):
    from core.logs import CONTEXT
    from refunds import runner, services, signals

    seen = []

    def step(sender, **kwargs):
        seen.append(dict(CONTEXT.get()))

    signals.step_reached.connect(step)
    try:
        ticket = services.ticket_open(order_number="1042")
        runner.advance(ticket.pk)
    finally:
        signals.step_reached.disconnect(step)
    assert seen and seen[0]["ticket_id"] == ticket.pk and seen[0]["thread_id"] == ticket.thread_id


# --- headers -------------------------------------------------------------------------------------
def test_every_page_has_a_strict_csp_and_a_permissions_policy(client, agent):
    client.force_login(agent)
    for url in ["/", "/login/", "/tickets/new/", "/account/token/", "/api/docs/"]:
        response = client.get(url)
        csp = response["Content-Security-Policy"]
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, url
        assert "script-src 'self'" in csp and "style-src 'self'" in csp, url
        assert "frame-ancestors 'none'" in csp
        assert "camera=()" in response["Permissions-Policy"]
        assert response["X-Frame-Options"] == "DENY"


def test_https_settings_follow_the_environment(client, db, settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert client.get("/login/").status_code == 301  # plain HTTP goes to HTTPS
    secure = client.get("/login/", HTTP_X_FORWARDED_PROTO="https")
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"].startswith("max-age=31536000")


INLINE = [
    (re.compile(r"\sstyle\s*=", re.I), "a style attribute"),
    (re.compile(r"<style[\s>]", re.I), "a <style> element"),
    (re.compile(r"<script(?![^>]*\ssrc=)[^>]*>", re.I), "an inline <script>"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "an on* handler attribute"),
    (re.compile(r"\shx-on[:-]", re.I), "an hx-on attribute (needs eval)"),
    (re.compile(r"javascript:", re.I), "a javascript: URL"),
]


def test_no_template_has_inline_script_or_style():
    # The Content-Security-Policy has no 'unsafe-inline': such a template would break in the
    # browser. This keeps new templates compliant.
    found = []
    for template in sorted((ROOT / "templates").rglob("*.html")):
        text = template.read_text()
        for pattern, what in INLINE:
            for match in pattern.finditer(text):
                line = text[: match.start()].count("\n") + 1
                found.append(f"{template.relative_to(ROOT)}:{line}: {what}")
    assert found == []


def test_the_template_scan_catches_what_it_looks_for():
    samples = [
        '<p style="x">',
        "<style>p{}</style>",
        "<script>alert(1)</script>",
        '<a onclick="x">',
        '<b hx-on:click="x">',
    ]
    assert all(any(p.search(s) for p, _ in INLINE) for s in samples)
    assert not any(p.search('<script src="/static/x.js" defer></script>') for p, _ in INLINE)


# --- logins lock out ------------------------------------------------------------------------------
def test_a_login_locks_out_after_five_wrong_passwords(client, agent, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        wrong = client.post("/login/", {"username": "agent", "password": "wrong"})
        assert wrong.status_code == 200  # the form again, with its error
    assert client.post("/login/", {"username": "agent", "password": "wrong"}).status_code == 429
    locked = client.post("/login/", {"username": "agent", "password": "pw"})  # the right one
    assert locked.status_code == 429
    assert b"Too many failed logins" in locked.content
    assert "_auth_user_id" not in client.session


def test_a_right_password_before_the_limit_logs_in_and_resets(client, agent):
    for _ in range(3):
        client.post("/login/", {"username": "agent", "password": "wrong"})
    assert client.post("/login/", {"username": "agent", "password": "pw"}).status_code == 302
    client.logout()
    for _ in range(3):
        client.post("/login/", {"username": "agent", "password": "wrong"})
    assert client.post("/login/", {"username": "agent", "password": "pw"}).status_code == 302


def test_a_lockout_is_per_address(agent, settings):
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        attacker.post("/login/", {"username": "agent", "password": "wrong"})
    colleague = Client(REMOTE_ADDR="198.51.100.7")
    assert colleague.post("/login/", {"username": "agent", "password": "pw"}).status_code == 302


# --- API keys ------------------------------------------------------------------------------------
def test_an_api_key_is_kept_as_its_hash_and_shown_once(client, agent):
    client.force_login(agent)
    made = client.post("/account/token/")
    key = re.search(r'<code id="api-token">([^<]+)</code>', made.content.decode())[1]
    token = ApiToken.objects.get(user=agent)
    assert token.key_hash == hash_token(key) and key not in token.key_hash
    assert not any(key in str(v) for v in ApiToken.objects.values().get().values())
    again = client.get("/account/token/").content.decode()
    assert key not in again and token.hint in again
    api = Client(headers={"Authorization": f"Bearer {key}"})
    assert api.get("/api/tickets/").status_code == 200


def test_replacing_a_key_revokes_the_old_one(client, agent):
    old = ApiToken.issue(agent)[1]
    client.force_login(agent)
    client.post("/account/token/")
    assert (
        Client(headers={"Authorization": f"Bearer {old}"}).get("/api/tickets/").status_code == 401
    )


def test_admins_cannot_add_or_edit_tokens(client, admin_user, agent):
    ApiToken.issue(agent)
    token = ApiToken.objects.get()
    client.force_login(admin_user)
    assert client.get("/admin/api/apitoken/add/").status_code == 403
    page = client.get(f"/admin/api/apitoken/{token.pk}/change/")
    assert page.status_code == 200 and b'name="key_hash"' not in page.content
    assert client.post(f"/admin/api/apitoken/{token.pk}/change/", {"hint": "x"}).status_code == 403


def test_admins_revoke_a_token(client, admin_user, agent):
    ApiToken.issue(agent)
    token = ApiToken.objects.get()
    client.force_login(admin_user)
    client.post(f"/admin/api/apitoken/{token.pk}/delete/", {"post": "yes"})
    assert not ApiToken.objects.exists()


def test_a_user_in_no_group_has_a_key_that_reads_nothing(db, late_order):
    from refunds.models import Ticket

    nobody = User.objects.create_user("nobody", password="pw")
    Ticket.objects.create(thread_id="t", order=late_order)
    api = Client(headers={"Authorization": f"Bearer {ApiToken.issue(nobody)[1]}"})
    assert api.get("/api/tickets/").json()["count"] == 0


def test_the_demos_access_lines_are_words_and_still_mask_addresses():
    """The demo's console showed each request as a JSON object; a person reads a line."""
    from core.logs import access_line

    atoms = {
        "m": "GET",
        "U": "/customers/ana@example.com/",
        "q": "page=2",
        "s": "200",
        "D": 12500,
        "{x-request-id}o": "1f2e",
    }
    line = access_line(atoms, words=True)
    assert line == "GET /customers/***@…/?page=2 200 in 12.5 ms, request 1f2e"
    assert json.loads(access_line(atoms))["path"] == "/customers/***@…/"
