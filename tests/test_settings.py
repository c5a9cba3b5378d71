"""Settings come from the environment through environs and a few checks of our own; a bad value
stops the process at start with one line that names the variable."""

from __future__ import annotations

import ast
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from marshmallow.validate import Range

from config.env import BadSetting, env, env_addresses, env_url

ROOT = Path(__file__).resolve().parent.parent
VAR = "REFUNDS_TEST_SETTING"


# --- the reader ----------------------------------------------------------------------------------
def test_a_string_is_the_variable_or_the_default_and_never_expanded(monkeypatch):
    monkeypatch.delenv(VAR, raising=False)
    assert env.str(VAR, "fallback") == "fallback"
    # A generated SECRET_KEY may start with "$": it is a value, not a reference to another.
    monkeypatch.setenv(VAR, "$HOME${HOME}")
    assert env.str(VAR, "fallback") == "$HOME${HOME}"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        ("on", True),
        ("0", False),
        ("False", False),
        ("no", False),
        ("off", False),
    ],
)
def test_an_on_off_variable_reads_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv(VAR, raw)
    assert env.bool(VAR, not expected) is expected


def test_an_on_off_variable_falls_back_to_the_default(monkeypatch):
    monkeypatch.delenv(VAR, raising=False)
    assert env.bool(VAR, True) is True


@pytest.mark.parametrize("raw", ["maybe", "2", "tru", ""])
def test_an_on_off_variable_refuses_anything_else_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured, match=f"^{VAR}={raw!r}: Not a valid boolean"):
        env.bool(VAR, True)


def test_a_number_is_read_at_or_above_its_minimum(monkeypatch):
    monkeypatch.setenv(VAR, "2.5")
    assert env.float(VAR, 30.0, validate=Range(min=1.0)) == 2.5
    monkeypatch.setenv(VAR, "1")
    assert env.float(VAR, 30.0, validate=Range(min=1.0)) == 1.0
    monkeypatch.delenv(VAR)
    assert env.float(VAR, 30.0, validate=Range(min=1.0)) == 30.0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("abc", "Not a valid number."),
        ("", "Not a valid number."),
        ("1e3x", "Not a valid number."),
        ("nan", "Special numeric values (nan or infinity) are not permitted."),
        ("inf", "Special numeric values (nan or infinity) are not permitted."),
        ("-inf", "Special numeric values (nan or infinity) are not permitted."),
        ("0.5", "Must be greater than or equal to 1.0."),
    ],
)
def test_a_number_refuses_bad_values_naming_the_variable(monkeypatch, raw, message):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured) as refused:
        env.float(VAR, 30.0, validate=Range(min=1.0))
    assert str(refused.value) == f"{VAR}={raw!r}: {message}"


def test_an_integer_is_read(monkeypatch):
    monkeypatch.setenv(VAR, " 7 ")
    assert env.int(VAR, 5, validate=Range(min=1)) == 7
    assert isinstance(env.int(VAR, 5, validate=Range(min=1)), int)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("1.5", "Not a valid integer."),
        ("five", "Not a valid integer."),
        ("0", "Must be greater than or equal to 1."),
    ],
)
def test_an_integer_refuses_bad_values_naming_the_variable(monkeypatch, raw, message):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured, match=f"^{VAR}={raw!r}: {message}$"):
        env.int(VAR, 5, validate=Range(min=1))


def test_env_url_reads_a_url_with_an_allowed_scheme(monkeypatch):
    monkeypatch.setenv(VAR, " postgres://u:p@db/refunds ")
    schemes = ("sqlite", "postgres")
    assert env_url(VAR, "sqlite:///x", schemes=schemes) == "postgres://u:p@db/refunds"
    monkeypatch.delenv(VAR)
    assert env_url(VAR, "sqlite:///x", schemes=("sqlite", "postgres")) == "sqlite:///x"


@pytest.mark.parametrize(
    ("raw", "got"),
    [
        ("mysql://u:secret@db/x", "a mysql:// URL"),
        ("/var/db.sqlite3", "a value without a scheme"),
        ("", "a value without a scheme"),
    ],
)
def test_env_url_refuses_other_schemes_without_echoing_credentials(monkeypatch, raw, got):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured) as refused:
        env_url(VAR, "sqlite:///x", schemes=("sqlite", "postgres"))
    message = str(refused.value)
    assert message == f"{VAR} must start with one of sqlite://, postgres://; got {got}"
    assert "secret" not in message


def test_env_addresses_reads_addresses_as_django_admins_takes_them(monkeypatch):
    monkeypatch.setenv(VAR, '"Souza, Ana" <ana@example.com>, ops@example.com')
    assert env_addresses(VAR, "") == [("Souza, Ana", "ana@example.com"), ("", "ops@example.com")]
    monkeypatch.setenv(VAR, " ")
    assert env_addresses(VAR, "") == []
    monkeypatch.delenv(VAR)
    assert env_addresses(VAR, "") == []


@pytest.mark.parametrize("raw", ["ops", "ops@", "Ana <@example.com>", "ana smith@example.com"])
def test_env_addresses_refuses_what_is_not_an_address_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured, match=f"^{VAR} must be email addresses"):
        env_addresses(VAR, "")


def test_a_bad_setting_is_an_improperly_configured():
    assert issubclass(BadSetting, ImproperlyConfigured)


# --- starting Django with a bad setting ----------------------------------------------------------
def manage_check(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REFUNDS_", "CELERY_", "DATABASE_URL", "CHECKPOINT_URL"))
        and k not in ("DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "PROMETHEUS_MULTIPROC_DIR")
    }
    return subprocess.run(
        [sys.executable, "manage.py", *(args or ("check",))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        # The demo unless a test says otherwise: most settings are the same in both modes.
        env={**clean, "REFUNDS_DATA_DIR": str(tmp_path), "REFUNDS_DEMO": "true", **env},
    )


def test_the_demo_starts_on_the_embedded_defaults(tmp_path):
    result = manage_check(tmp_path, REFUNDS_DEMO="true")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


PRODUCTION = {
    "REFUNDS_DEMO": "false",
    "DEBUG": "false",
    "SECRET_KEY": "prod-" + "x1y2z3" * 10,
    "ALLOWED_HOSTS": "desk.example.com",
    "HTTPS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    # Real mail and money: production refuses the fakes (console mail, the demo gateway).
    "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
    "REFUNDS_GATEWAY": "refunds.payments.HttpGateway",
    # Production encrypts checkpoints: a key (32 bytes, urlsafe base64) or it refuses to start.
    "REFUNDS_CHECKPOINT_KEYS": "dGVzdHMtb25seS1jaGVja3BvaW50LWtleS0zMi1ieXQ=",
}


def test_production_starts_with_a_secret_key_and_debug_off(tmp_path):
    result = manage_check(tmp_path, **PRODUCTION)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REFUNDS_LEASE_SECONDS": "abc"}, "REFUNDS_LEASE_SECONDS='abc': Not a valid number."),
        (
            {"REFUNDS_MAX_ATTEMPTS": "0"},
            "REFUNDS_MAX_ATTEMPTS='0': Must be greater than or equal to 1.",
        ),
        (
            {"DATABASE_URL": "mysql://u:secret@db/refunds"},
            "DATABASE_URL must start with one of sqlite://, postgres://, postgresql://",
        ),
        ({"CHECKPOINT_URL": "redis://localhost"}, "CHECKPOINT_URL must start with one of"),
        (
            {
                "DATABASE_URL": "postgres://u@127.0.0.1:5432/refunds",
                "DATABASE_SERVER_SIDE_BINDING": "maybe",
            },
            "DATABASE_SERVER_SIDE_BINDING='maybe': Not a valid boolean.",
        ),
        ({"CELERY_BROKER_URL": "sqs://queue"}, "CELERY_BROKER_URL must start with one of"),
        (
            {"CELERY_TASK_TIME_LIMIT": "360"},
            "CELERY_TASK_TIME_LIMIT (360 s) must be below CELERY_VISIBILITY_TIMEOUT (360 s)",
        ),
        (
            {"CELERY_TASK_TIME_LIMIT": "100", "CELERY_VISIBILITY_TIMEOUT": "60"},
            "CELERY_TASK_TIME_LIMIT (100 s) must be below CELERY_VISIBILITY_TIMEOUT (60 s)",
        ),
        (
            {"CELERY_TASK_SOFT_TIME_LIMIT": "300"},
            "CELERY_TASK_SOFT_TIME_LIMIT (300 s) must be below CELERY_TASK_TIME_LIMIT (300 s)",
        ),
        (
            {"CELERY_BROKER_URL": "amqp://guest:secret@rabbit//"},
            "REDBEAT_REDIS_URL must name a Redis server (beat's one-beat lock) when "
            "CELERY_BROKER_URL is not Redis",
        ),
        (
            {"CELERY_BROKER_URL": "amqp://rabbit//", "REDBEAT_REDIS_URL": "rabbit"},
            "REDBEAT_REDIS_URL must start with one of redis://, rediss://, unix://",
        ),
        ({"DEBUG": "sometimes"}, "DEBUG='sometimes': Not a valid boolean."),
        ({"REFUNDS_DEMO": "perhaps"}, "REFUNDS_DEMO='perhaps': Not a valid boolean."),
        ({"REFUNDS_DEMO": "false", "DEBUG": "false"}, "SECRET_KEY must be set when DEBUG is off"),
        ({"REFUNDS_DEMO": "false"}, "SECRET_KEY must be set when DEBUG is off"),  # off by default
        (
            {"REFUNDS_DEMO": "true", "DEBUG": "false"},
            "REFUNDS_DEMO=true needs DEBUG on",
        ),
        (
            {"REFUNDS_DEMO": "true", "LOG_LEVEL": "verbose"},
            "LOG_LEVEL='verbose': Not a valid log level.",
        ),
        (
            {"REFUNDS_DEMO": "true", "REFUNDS_DATA_DIR": "/etc/hostname/var"},
            "REFUNDS_DATA_DIR (/etc/hostname/var) cannot be created",
        ),
        (
            {"REFUNDS_DEMO": "true", "DATABASE_URL": "sqlite:////no/such/folder/db.sqlite3"},
            "DATABASE_URL names a SQLite file in a folder that does not exist: /no/such/folder",
        ),
        (
            {"REFUNDS_DEMO": "true", "CHECKPOINT_URL": "sqlite:////no/such/folder/cp.sqlite3"},
            "CHECKPOINT_URL names a SQLite file in a folder that does not exist",
        ),
        (
            {"REFUNDS_DEMO": "true", "API_MAX_BODY_BYTES": "ten"},
            "API_MAX_BODY_BYTES='ten': Not a valid",
        ),
        (
            {"REFUNDS_DEMO": "true", "REFUNDS_ASK_DEFAULT_OUTCOME": "reopen"},
            "REFUNDS_ASK_DEFAULT_OUTCOME='reopen': Must be one of: queue, close.",
        ),
        (
            {"REFUNDS_DEMO": "true", "WEBHOOK_SWEEP_BUDGET_SECONDS": "236"},
            "WEBHOOK_SWEEP_BUDGET_SECONDS + WEBHOOK_TIMEOUT (236.0 + 5.0 s) must be below "
            "CELERY_TASK_SOFT_TIME_LIMIT (240 s)",
        ),
        ({"REFUNDS_DEMO": "true", "WEBHOOK_ALLOW_PRIVATE": "sure"}, "WEBHOOK_ALLOW_PRIVATE='sure'"),
        (
            {"REFUNDS_DEMO": "true", "REFUNDS_CHARGE_RETRY_SECONDS": "120"},
            "REFUNDS_CHARGE_RETRY_SECONDS (120.0 s) must be below half of "
            "CELERY_TASK_SOFT_TIME_LIMIT (240 s)",
        ),
        (
            {"REFUNDS_DEMO": "true", "TRUSTED_PROXY_IPS": "127.0.0.1,proxy.example"},
            "TRUSTED_PROXY_IPS must be IP addresses or networks: 'proxy.example' is not",
        ),
        (
            {"REFUNDS_DEMO": "true", "READYZ_SWEEP_LATE_SECONDS": "30"},
            "READYZ_SWEEP_LATE_SECONDS (30 s) must be above REFUNDS_SWEEP_SECONDS + "
            "BEAT_LOCK_SECONDS (5 + 30 s)",
        ),
    ],
)
def test_a_bad_setting_stops_django_at_start_with_one_line(tmp_path, env, message):
    result = manage_check(tmp_path, **env)

    assert result.returncode != 0
    assert result.stderr.startswith(f"Refund Desk cannot start: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "secret" not in result.stderr


def typed_variables() -> list[str]:
    """The variables config/settings.py reads as a number, an on/off or a log level, or checks
    with a validator: each has values it refuses."""
    tree = ast.parse((ROOT / "config" / "settings.py").read_text(encoding="utf-8"))
    return sorted(
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).startswith("env.")
        and (ast.unparse(node.func) != "env.str" or any(k.arg == "validate" for k in node.keywords))
    )


@pytest.mark.parametrize("name", typed_variables())
def test_a_bad_value_of_any_typed_variable_is_refused_naming_it(monkeypatch, tmp_path, name):
    for variable, value in {
        "REFUNDS_DATA_DIR": str(tmp_path),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),  # the settings export it
        "REFUNDS_DEMO": "true",
        "DATABASE_URL": "postgres://u@127.0.0.1:1/x",  # its options are read, never connected
        name: "not-a-value",
    }.items():
        monkeypatch.setenv(variable, value)

    with pytest.raises(BadSetting, match=f"^{name}='not-a-value': "):
        runpy.run_path(str(ROOT / "config" / "settings.py"))


def test_an_unreachable_postgresql_stops_migrate_with_one_line_and_no_password(tmp_path):
    from devtools.smtp_sink import free_port

    url = f"postgres://refunds:hunter22@127.0.0.1:{free_port()}/refunds"
    result = manage_check(tmp_path, "migrate", REFUNDS_DEMO="true", DATABASE_URL=url)

    assert result.returncode != 0
    assert result.stderr.startswith("Refund Desk cannot reach its database (DATABASE_URL): "), (
        result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "hunter22" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("gateway", "check_id", "message"),
    [
        ("refunds.nowhere.Gateway", "refunds.E001", "cannot be imported"),
        ("refunds.models.Order", "refunds.E002", "has no charge() method"),
    ],
)
def test_a_gateway_that_cannot_charge_fails_the_system_check(tmp_path, gateway, check_id, message):
    result = manage_check(tmp_path, REFUNDS_GATEWAY=gateway, REFUNDS_DEMO="true")

    assert result.returncode != 0
    assert f"({check_id}) REFUNDS_GATEWAY='{gateway}' {message}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_setting_still_raises_for_code_that_imports_settings(tmp_path):
    # Only the uncaught, process-ending case is shortened; an importer can still catch it.
    code = (
        "import django\n"
        "from django.core.exceptions import ImproperlyConfigured\n"
        "try:\n    django.setup()\n"
        "except ImproperlyConfigured as exc:\n    print('caught:', exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "REFUNDS_DATA_DIR": str(tmp_path),
            "REFUNDS_LEASE_SECONDS": "-1",
        },
    )
    assert result.returncode == 0, result.stderr
    assert "caught: REFUNDS_LEASE_SECONDS='-1': Must be greater than or equal to 1.0." in (
        result.stdout
    )


@pytest.mark.parametrize(
    ("message", "one_line"),
    [
        ('connection failed: connection to server at "127.0.0.1", port 1 failed', True),
        ("unable to open database file", True),
        ("database is locked", False),  # a live database under contention: keep the traceback
        ("deadlock detected", False),
    ],
)
def test_only_a_database_that_cannot_be_reached_is_reported_in_one_line(message, one_line):
    from django.db.utils import OperationalError

    from config.env import _is_database_unreachable

    assert _is_database_unreachable(OperationalError(message)) is one_line


# --- production refuses the fakes -----------------------------------------------------------------
REAL = {k: v for k, v in PRODUCTION.items() if k not in ("EMAIL_BACKEND", "REFUNDS_GATEWAY")}
CONSOLE = "django.core.mail.backends.console.EmailBackend"
LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
SMTP = "django.core.mail.backends.smtp.EmailBackend"
HTTP_GATEWAY = "refunds.payments.HttpGateway"
FIX = (
    "; production needs a real one (or REFUNDS_ALLOW_FAKES=true on a staging box, "
    "or REFUNDS_DEMO=true for the demo)"
)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"REFUNDS_GATEWAY": HTTP_GATEWAY},  # mail left at its default: the console
            f"EMAIL_BACKEND={CONSOLE}: mail is printed, never sent{FIX}",
        ),
        (
            {"EMAIL_BACKEND": LOCMEM, "REFUNDS_GATEWAY": HTTP_GATEWAY},
            f"EMAIL_BACKEND={LOCMEM}: mail is kept in memory, never sent{FIX}",
        ),
        (
            {"EMAIL_BACKEND": SMTP},  # the gateway left at its default: the demo's
            "REFUNDS_GATEWAY=refunds.payments.DemoGateway: refunds move no money "
            f"(the demo gateway){FIX}",
        ),
        (
            {"EMAIL_BACKEND": SMTP, "REFUNDS_GATEWAY": "refunds.payments.demo.DemoGateway"},
            "REFUNDS_GATEWAY=refunds.payments.demo.DemoGateway: refunds move no money "
            f"(the demo gateway){FIX}",
        ),
        (
            {"EMAIL_BACKEND": SMTP, "REFUNDS_GATEWAY": HTTP_GATEWAY, "REFUNDS_ALLOW_FAKES": "no"},
            None,  # nothing fake: production starts
        ),
    ],
)
def test_production_refuses_to_start_with_a_fake_in_one_line(tmp_path, env, message):
    result = manage_check(tmp_path, **REAL, **env)

    if message is None:
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode != 0
    assert result.stderr == f"Refund Desk cannot start: {message}\n"


def test_a_celery_worker_refuses_the_fakes_at_start_too(tmp_path):
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REFUNDS_", "CELERY_", "DATABASE_URL", "CHECKPOINT_URL"))
        and k not in ("DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "PROMETHEUS_MULTIPROC_DIR")
    }
    result = subprocess.run(
        [str(Path(sys.executable).parent / "celery"), "-A", "config", "worker", "--pool", "solo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **REAL, "REFUNDS_DATA_DIR": str(tmp_path), "REFUNDS_GATEWAY": HTTP_GATEWAY},
    )

    assert result.returncode != 0
    assert f"Refund Desk cannot start: EMAIL_BACKEND={CONSOLE}" in result.stderr, result.stderr


def test_an_operator_may_allow_the_fakes_on_a_staging_box_and_every_page_says_so(tmp_path):
    show = "from django.conf import settings; print(settings.REFUNDS_FAKES_BANNER)"
    staging = manage_check(tmp_path, "shell", "-c", show, **REAL, REFUNDS_ALLOW_FAKES="true")
    demo = manage_check(tmp_path, "shell", "-c", show, REFUNDS_DEMO="true")

    assert staging.returncode == 0, staging.stderr
    assert staging.stdout.strip().splitlines()[-1] == (
        "['mail is printed, never sent', 'refunds move no money (the demo gateway)']"
    )
    assert (
        demo.stdout.strip().splitlines()[-1] == "[]"
    )  # the demo says what it is as it starts, not in a banner


@pytest.mark.parametrize(
    ("broker", "backend"),
    [
        ("redis://127.0.0.1:6379/2", "django.core.cache.backends.redis.RedisCache"),
        ("", "django.core.cache.backends.locmem.LocMemCache"),  # the embedded broker
        ("amqp://rabbit//", "django.core.cache.backends.locmem.LocMemCache"),
    ],
)
def test_the_queue_cards_are_kept_on_the_brokers_redis_under_their_own_prefix(
    tmp_path, broker, backend
):
    env = {"CELERY_BROKER_URL": broker, "REDBEAT_REDIS_URL": "redis://beat"} if broker else {}
    result = manage_check(
        tmp_path,
        "shell",
        "--no-imports",
        "-c",
        "from django.conf import settings; print(settings.CACHES)",
        **env,
    )
    assert result.returncode == 0, result.stderr
    cards = ast.literal_eval(result.stdout.strip())["cards"]
    assert cards["BACKEND"] == backend
    if broker.startswith("redis"):
        assert (cards["LOCATION"], cards["KEY_PREFIX"]) == (broker, "refunds:cards")
