"""Refund Desk settings, all from the environment: docs/operations.md's tables say what each
variable means. The defaults run one machine with no server installed; REFUNDS_DEMO=true is the
demo, anything else production."""

import importlib.util
import ipaddress
import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue
from marshmallow.validate import OneOf, Range

from config.env import (
    BadSetting,
    aes_keys,
    env,
    env_addresses,
    env_list,
    env_url,
    exit_on_bad_setting,
    model_spec,
    sqlite_file,
    writable_dir,
)
from config.storage import attachments_storage
from refunds.policy import DEFAULT_AGENT_LIMIT_CENTS, REASONS

exit_on_bad_setting()  # a bad variable stops the process with one line naming it

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = writable_dir("REFUNDS_DATA_DIR", env.str("REFUNDS_DATA_DIR", str(BASE_DIR / "var")))

# --- Demo or production -----------------------------------------------------------------------
DEMO = env.bool("REFUNDS_DEMO", False)
DEBUG = env.bool("DEBUG", DEMO)
if DEMO and not DEBUG:
    raise BadSetting("REFUNDS_DEMO=true needs DEBUG on: the demo (demo users) is never production")
SECRET_KEY = env.str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise BadSetting("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-local-only-key"  # noqa: S105 - DEBUG-only fallback
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", 0, validate=Range(min=0))
TRUSTED_PROXY_IPS: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
for _ip in env_list("TRUSTED_PROXY_IPS", "127.0.0.1,::1"):
    try:
        TRUSTED_PROXY_IPS.append(ipaddress.ip_network(_ip, strict=False))
    except ValueError:
        raise BadSetting(
            f"TRUSTED_PROXY_IPS must be IP addresses or networks: {_ip!r} is not"
        ) from None
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

# --- HTTPS (what `manage.py check --deploy` asks for; HTTPS=true sets them all) ---------------
HTTPS = env.bool("HTTPS", False)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", HTTPS)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", HTTPS)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", HTTPS)
SECURE_HSTS_SECONDS = env.int(
    "SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0, validate=Range(min=0)
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", False)
_proxy_header = env.str("SECURE_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https") if _proxy_header else None
)
# 1,000 form fields and 2.5 MB bodies are Django's defaults; the API allows far less (see API_).
DATA_UPLOAD_MAX_NUMBER_FIELDS = 200
PERMISSIONS_POLICY = (
    "accelerometer=(), camera=(), geolocation=(), gyroscope=(), magnetometer=(), "
    "microphone=(), payment=(), usb=(), interest-cohort=()"
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    # {% partialdef %}: an htmx answer is a named part of its page ("reviews/queue.html#rows").
    "template_partials",
    "anymail",  # the mail provider: its backends and tracking webhooks (config/urls.py)
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "refunds",
    "api",
    "reviews",
    "webhooks",
    "insights",
    "ops.apps.OpsConfig",
    "intake",
]

MIDDLEWARE = [
    "core.logs.request_id_middleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.middleware.permissions_policy_middleware",
    "csp.middleware.CSPMiddleware",
    "api.errors.api_guard_middleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "reviews.views.errors.desk_not_found_middleware",
    "config.middleware.reviewer_time_zone_middleware",
    "config.middleware.DatabaseUnavailableMiddleware",
    "config.login_guard.login_guard_middleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

DATABASE_RETRY_AFTER_SECONDS = env.int("DATABASE_RETRY_AFTER_SECONDS", 5, validate=Range(min=1))

# --- Content-Security-Policy (django-csp): nothing inline, nothing from elsewhere ---------------
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

# --- Login throttling and lockout (django-axes) ---------------------------------------------
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", 5, validate=Range(min=1))
AXES_COOLOFF_TIME = timedelta(
    minutes=env.float("LOGIN_LOCKOUT_MINUTES", 15.0, validate=Range(min=0.1))
)
# Locked per user name and address pair: one attacker cannot lock a colleague out from elsewhere.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# 429 with Retry-After, the same page as the per-address limit (config/login_guard.py).
AXES_LOCKOUT_CALLABLE = "config.login_guard.locked_out"
# Not REMOTE_ADDR, the proxy's: five wrong passwords from anywhere would lock a user out everywhere.
AXES_CLIENT_IP_CALLABLE = "core.addresses.client_ip"
LOGIN_FAILURES_PER_IP = env.str("LOGIN_FAILURES_PER_IP", "20/hour")
AXES_VERBOSE = False

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "refunds.context_processors.fakes_banner",
                "intake.context_processors.needs_sorting",
            ],
        },
    },
]

# --- Databases -------------------------------------------------------------------------------
DATABASE_URL = env_url(
    "DATABASE_URL",
    f"sqlite:///{DATA_DIR / 'db.sqlite3'}",
    schemes=("sqlite", "postgres", "postgresql"),
)
DATABASES = {
    # Checked before reuse: after the database drops connections a request gets a fresh one.
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    sqlite_file("DATABASE_URL", DATABASES["default"]["NAME"])
    DATABASES["default"]["OPTIONS"] = {
        # Web, worker and beat write the same file: WAL lets readers through, IMMEDIATE takes
        # the write lock up front so two writers queue on busy_timeout instead of deadlocking.
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests start real worker processes, which cannot see an in-memory database.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-db.sqlite3")}
IS_POSTGRES = DATABASES["default"]["ENGINE"].startswith("django.db.backends.postgresql")
if IS_POSTGRES:
    # An unreachable database answers in seconds, not after the operating system's TCP timeout.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options.setdefault("connect_timeout", 5)
    _options["server_side_binding"] = env.bool("DATABASE_SERVER_SIDE_BINDING", True)

CHECKPOINT_URL = env_url("CHECKPOINT_URL", "", schemes=("sqlite", "postgres", "postgresql"))
if CHECKPOINT_URL.startswith("sqlite"):
    sqlite_file("CHECKPOINT_URL", dj_database_url.parse(CHECKPOINT_URL)["NAME"])
CHECKPOINT_POOL_SIZE = env.int("CHECKPOINT_POOL_SIZE", 4, validate=Range(min=1))
# AES-256 keys for checkpoints and the store: the first writes, every one listed reads (rotation).
REFUNDS_CHECKPOINT_KEYS = aes_keys(
    "REFUNDS_CHECKPOINT_KEYS", env.str("REFUNDS_CHECKPOINT_KEYS", "")
)
REFUNDS_ALLOW_UNENCRYPTED_CHECKPOINTS = env.bool("REFUNDS_ALLOW_UNENCRYPTED_CHECKPOINTS", False)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "reviews:queue"
LOGOUT_REDIRECT_URL = "login"

# Customers' languages: those the intake's reader tells apart. The desk itself is in English.
LANGUAGES = [
    ("en", "English"),
    ("es", "Spanish"),
    ("de", "German"),
    ("fr", "French"),
    ("pt", "Portuguese"),
    ("it", "Italian"),
]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env.str("TIME_ZONE", "UTC")

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise serves from here after collectstatic
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Files found in the source folders have no compressed copies: only where nothing was collected.
WHITENOISE_USE_FINDERS = DEBUG or not any(STATIC_ROOT.iterdir())
WHITENOISE_MAX_AGE = 3600

# --- Email: Django's mail framework, console by default ---------------------------------------
EMAIL_BACKEND = env.str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_FILE_PATH = env.str("EMAIL_FILE_PATH", str(DATA_DIR / "mail"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", "Refund Desk <refunds@example.com>")
EMAIL_HOST = env.str("EMAIL_HOST", "localhost")
EMAIL_PORT = env.int("EMAIL_PORT", 25, validate=Range(min=1))
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env.bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env.float("EMAIL_TIMEOUT", 10.0, validate=Range(min=0.1))
ADMINS = env_addresses("ADMINS", "")
SERVER_EMAIL = DEFAULT_FROM_EMAIL  # the sender of the admins' email (Django's is root@localhost)
EMAIL_SUBJECT_PREFIX = "[Refund Desk] "

# --- Mail provider (django-anymail): every ANYMAIL_<NAME> variable is anymail's <NAME> setting ---
ANYMAIL = {
    name.removeprefix("ANYMAIL_"): value
    for name, value in os.environ.items()
    if name.startswith("ANYMAIL_") and value
}

# --- The workflow ----------------------------------------------------------------------------
REFUNDS_AGENT_LIMIT_CENTS = env.int(
    "REFUNDS_AGENT_LIMIT_CENTS", DEFAULT_AGENT_LIMIT_CENTS, validate=Range(min=1)
)
REFUNDS_GATEWAY = env.str("REFUNDS_GATEWAY", "refunds.payments.DemoGateway")
REFUNDS_LEASE_SECONDS = env.float("REFUNDS_LEASE_SECONDS", 30.0, validate=Range(min=1.0))
REFUNDS_MAX_ATTEMPTS = env.int("REFUNDS_MAX_ATTEMPTS", 5, validate=Range(min=1))
REFUNDS_SWEEP_SECONDS = env.float("REFUNDS_SWEEP_SECONDS", 5.0, validate=Range(min=0.5))
REFUNDS_SWEEP_GRACE_SECONDS = env.float("REFUNDS_SWEEP_GRACE_SECONDS", 5.0, validate=Range(min=0.0))
REFUNDS_REWAKE_SECONDS = env.float("REFUNDS_REWAKE_SECONDS", 30.0, validate=Range(min=0.0))
REFUNDS_GATEWAY_URL = env.str("REFUNDS_GATEWAY_URL", "")
REFUNDS_GATEWAY_TIMEOUT = env.float("REFUNDS_GATEWAY_TIMEOUT", 10.0, validate=Range(min=0.1))
REFUNDS_CHARGE_RETRY_SECONDS = env.float(
    "REFUNDS_CHARGE_RETRY_SECONDS", 45.0, validate=Range(min=0.0)
)
STRIPE_SECRET_KEY = env.str("STRIPE_SECRET_KEY", "")
STRIPE_API_BASE = env_url("STRIPE_API_BASE", "https://api.stripe.com", schemes=("https", "http"))
STRIPE_TIMEOUT = env.float("STRIPE_TIMEOUT", 10.0, validate=Range(min=0.1))
STRIPE_WEBHOOK_SECRET = env.str("STRIPE_WEBHOOK_SECRET", "")
STRIPE_WEBHOOK_TOLERANCE_SECONDS = env.int(
    "STRIPE_WEBHOOK_TOLERANCE_SECONDS", 300, validate=Range(min=10)
)
STRIPE_WEBHOOK_MAX_BODY_BYTES = env.int(
    "STRIPE_WEBHOOK_MAX_BODY_BYTES", 256 * 1024, validate=Range(min=16 * 1024)
)
# Shopify's compliance webhooks (ops/shop_webhook.py): the app's client secret signs them.
REFUNDS_SHOP_WEBHOOK_SECRET = env.str("REFUNDS_SHOP_WEBHOOK_SECRET", "")
REFUNDS_CARRIER = env.str("REFUNDS_CARRIER", "")
REFUNDS_CARRIER_TIMEOUT = env.float("REFUNDS_CARRIER_TIMEOUT", 5.0, validate=Range(min=0.01))
REFUNDS_CARRIER_ATTEMPTS = env.int("REFUNDS_CARRIER_ATTEMPTS", 2, validate=Range(min=1))

# --- The intake's reader (intake/reader/) --------------------------------------------------------
REFUNDS_MODEL = model_spec("REFUNDS_MODEL", env.str("REFUNDS_MODEL", ""))
REFUNDS_MODEL_API_KEY = env.str("REFUNDS_MODEL_API_KEY", "")
REFUNDS_MODEL_BASE_URL = env.str("REFUNDS_MODEL_BASE_URL", "")
REFUNDS_MODEL_TIMEOUT = env.float("REFUNDS_MODEL_TIMEOUT", 10.0, validate=Range(min=0.1))
REFUNDS_MODEL_ATTEMPTS = env.int("REFUNDS_MODEL_ATTEMPTS", 2, validate=Range(min=1))
REFUNDS_READER_MIN_CONFIDENCE = env.float(
    "REFUNDS_READER_MIN_CONFIDENCE", 0.5, validate=Range(min=0.0, max=1.0)
)
# The trained classifier (intake/reader/trained.py): the one shipped, trained by
# `manage.py train_reader` from the shipped data; a shop that retrains with its own corrections
# points this at its own file.
REFUNDS_READER_FILE = Path(
    env.str("REFUNDS_READER_FILE", str(BASE_DIR / "intake" / "reader" / "reader.npz"))
).expanduser()

# --- Production refuses the fakes -------------------------------------------------------------
PRINTED = "mail is printed, never sent"
FAKE_EMAIL_BACKENDS = {
    "django.core.mail.backends.console.EmailBackend": PRINTED,
    "django.core.mail.backends.locmem.EmailBackend": "mail is kept in memory, never sent",
    "django.core.mail.backends.filebased.EmailBackend": "mail is written to files, never sent",
    "django.core.mail.backends.dummy.EmailBackend": "mail is thrown away",
    "anymail.backends.test.EmailBackend": "mail is kept in memory, never sent",
    "anymail.backends.console.EmailBackend": PRINTED,
}
FAKE_GATEWAYS = dict.fromkeys(
    ("refunds.payments.DemoGateway", "refunds.payments.demo.DemoGateway"),
    "refunds move no money (the demo gateway)",
)
REFUNDS_ALLOW_FAKES = env.bool("REFUNDS_ALLOW_FAKES", False)
REFUNDS_FAKES_IN_USE = [
    f"{name}={value}: {FAKE_EMAIL_BACKENDS.get(value) or FAKE_GATEWAYS[value]}"
    for name, value in (("EMAIL_BACKEND", EMAIL_BACKEND), ("REFUNDS_GATEWAY", REFUNDS_GATEWAY))
    if value in FAKE_EMAIL_BACKENDS or value in FAKE_GATEWAYS
]
if REFUNDS_FAKES_IN_USE and not DEMO and not REFUNDS_ALLOW_FAKES:
    raise BadSetting(
        f"{REFUNDS_FAKES_IN_USE[0]}; production needs a real one "
        "(or REFUNDS_ALLOW_FAKES=true on a staging box, or REFUNDS_DEMO=true for the demo)"
    )
# Customers' words live in every checkpoint: production encrypts them unless told not to. A
# staging box on fakes (REFUNDS_ALLOW_FAKES) is not production and may skip the keys too.
if not (
    REFUNDS_CHECKPOINT_KEYS or DEMO or REFUNDS_ALLOW_FAKES or REFUNDS_ALLOW_UNENCRYPTED_CHECKPOINTS
):
    raise BadSetting(
        "REFUNDS_CHECKPOINT_KEYS is empty: production encrypts checkpoints and the store; set "
        "a key (docs/operations.md says how to make one) or "
        "REFUNDS_ALLOW_UNENCRYPTED_CHECKPOINTS=true"
    )
REFUNDS_FAKES_BANNER = [
    words.split(": ", 1)[1] for words in REFUNDS_FAKES_IN_USE if REFUNDS_ALLOW_FAKES and not DEMO
]

REFUNDS_ORDER_SOURCE = env_url("REFUNDS_ORDER_SOURCE", "", schemes=("http", "https"))
REFUNDS_ORDER_SOURCE_TOKEN = env.str("REFUNDS_ORDER_SOURCE_TOKEN", "")
REFUNDS_ORDER_SOURCE_TIMEOUT = env.float(
    "REFUNDS_ORDER_SOURCE_TIMEOUT", 3.0, validate=Range(min=0.1)
)
REFUNDS_ORDER_SOURCE_ATTEMPTS = env.int("REFUNDS_ORDER_SOURCE_ATTEMPTS", 2, validate=Range(min=1))

# --- Customers' words in (intake/) -------------------------------------------------------------
INTAKE_MAX_CHARS = env.int("INTAKE_MAX_CHARS", 20_000, validate=Range(min=100))
INTAKE_RECENT_ORDER_DAYS = env.int("INTAKE_RECENT_ORDER_DAYS", 60, validate=Range(min=1))
INBOUND_MAX_BODY_BYTES = env.int(
    "INBOUND_MAX_BODY_BYTES", 25 * 1024 * 1024, validate=Range(min=1024 * 1024)
)
INBOUND_SIGNATURE_MAX_AGE_SECONDS = env.int(
    "INBOUND_SIGNATURE_MAX_AGE_SECONDS", 900, validate=Range(min=60)
)
REFUNDS_ATTACHMENT_MAX_BYTES = env.int(
    "REFUNDS_ATTACHMENT_MAX_BYTES", 10 * 1024 * 1024, validate=Range(min=1024)
)
REFUNDS_ATTACHMENTS_PER_MESSAGE = env.int(
    "REFUNDS_ATTACHMENTS_PER_MESSAGE", 5, validate=Range(min=1)
)
REFUNDS_ATTACHMENT_PREVIEW_PIXELS = env.int(
    "REFUNDS_ATTACHMENT_PREVIEW_PIXELS", 40_000_000, validate=Range(min=1)
)
REFUNDS_ATTACHMENTS_S3_BUCKET = env.str("REFUNDS_ATTACHMENTS_S3_BUCKET", "")
REFUNDS_ATTACHMENTS_DIR = env.str("REFUNDS_ATTACHMENTS_DIR", str(DATA_DIR / "attachments"))
if not REFUNDS_ATTACHMENTS_S3_BUCKET:  # the folder is made, and must be writable, only if used
    REFUNDS_ATTACHMENTS_DIR = str(writable_dir("REFUNDS_ATTACHMENTS_DIR", REFUNDS_ATTACHMENTS_DIR))
REFUNDS_ATTACHMENTS_S3_ENDPOINT_URL = env_url(
    "REFUNDS_ATTACHMENTS_S3_ENDPOINT_URL", "", schemes=("http", "https")
)
REFUNDS_ATTACHMENTS_S3_REGION = env.str("REFUNDS_ATTACHMENTS_S3_REGION", "")
REFUNDS_ATTACHMENTS_URL_SECONDS = env.int(
    "REFUNDS_ATTACHMENTS_URL_SECONDS", 60, validate=Range(min=5)
)
REFUNDS_ATTACHMENTS_S3_SSE = env.str(
    "REFUNDS_ATTACHMENTS_S3_SSE", "", validate=OneOf(("", "AES256", "aws:kms"))
)
REFUNDS_ATTACHMENTS_S3_KMS_KEY_ID = env.str("REFUNDS_ATTACHMENTS_S3_KMS_KEY_ID", "")
if REFUNDS_ATTACHMENTS_S3_KMS_KEY_ID and REFUNDS_ATTACHMENTS_S3_SSE != "aws:kms":
    raise BadSetting("REFUNDS_ATTACHMENTS_S3_KMS_KEY_ID needs REFUNDS_ATTACHMENTS_S3_SSE=aws:kms")
STORAGES["attachments"] = attachments_storage(
    folder=REFUNDS_ATTACHMENTS_DIR,
    bucket=REFUNDS_ATTACHMENTS_S3_BUCKET,
    endpoint_url=REFUNDS_ATTACHMENTS_S3_ENDPOINT_URL,
    region=REFUNDS_ATTACHMENTS_S3_REGION,
    url_seconds=REFUNDS_ATTACHMENTS_URL_SECONDS,
    sse=REFUNDS_ATTACHMENTS_S3_SSE,
    kms_key_id=REFUNDS_ATTACHMENTS_S3_KMS_KEY_ID,
)
if REFUNDS_ATTACHMENTS_S3_BUCKET:
    # A photo on a page is the desk's link, redirected to the bucket: the page may show it.
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["img-src"].append(
        "/".join(REFUNDS_ATTACHMENTS_S3_ENDPOINT_URL.split("/")[:3])
        if REFUNDS_ATTACHMENTS_S3_ENDPOINT_URL
        else "https://*.amazonaws.com"
    )
# A dotted path wrapping every task of the functional-API workflows (intake, erasure), called with
# the task's name ("intake:read", "erase:orders"): the crash tests' points (devtools).
WORKFLOW_TASK_WRAPPER = ""

# devtools/ sits beside the app in a checkout, never installed with it: absent, its app is too.
if importlib.util.find_spec("devtools") is not None:
    INSTALLED_APPS.append("devtools")
REFUNDS_CRASH_PLAN = env.str("REFUNDS_CRASH_PLAN", "")
REFUNDS_NODE_WRAPPER = ""  # a dotted path wrapping every node (refunds/persistence/)
if REFUNDS_CRASH_PLAN and "devtools" not in INSTALLED_APPS:
    raise ImproperlyConfigured("REFUNDS_CRASH_PLAN needs devtools/, which this install lacks")

# --- Celery ----------------------------------------------------------------------------------
EMBEDDED_REDIS_SOCKET = DATA_DIR / "redis.sock"
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL",
    f"redis+socket://{EMBEDDED_REDIS_SOCKET}",
    schemes=("redis", "rediss", "redis+socket", "amqp", "amqps", "pyamqp"),
)
USES_EMBEDDED_BROKER = CELERY_BROKER_URL == f"redis+socket://{EMBEDDED_REDIS_SOCKET}"
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", 300, validate=Range(min=1))
CELERY_VISIBILITY_TIMEOUT = env.int("CELERY_VISIBILITY_TIMEOUT", 360, validate=Range(min=1))
if CELERY_TASK_TIME_LIMIT >= CELERY_VISIBILITY_TIMEOUT:
    # Otherwise Redis hands a still-running task to a second worker.
    raise BadSetting(
        f"CELERY_TASK_TIME_LIMIT ({CELERY_TASK_TIME_LIMIT} s) must be below "
        f"CELERY_VISIBILITY_TIMEOUT ({CELERY_VISIBILITY_TIMEOUT} s)"
    )
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", 240, validate=Range(min=1))
if CELERY_TASK_SOFT_TIME_LIMIT >= CELERY_TASK_TIME_LIMIT:
    raise BadSetting(
        f"CELERY_TASK_SOFT_TIME_LIMIT ({CELERY_TASK_SOFT_TIME_LIMIT} s) must be below "
        f"CELERY_TASK_TIME_LIMIT ({CELERY_TASK_TIME_LIMIT} s)"
    )
if REFUNDS_CHARGE_RETRY_SECONDS >= CELERY_TASK_SOFT_TIME_LIMIT / 2:
    # The retries and the rest of the run fit in one task, well before it is asked to stop.
    raise BadSetting(
        f"REFUNDS_CHARGE_RETRY_SECONDS ({REFUNDS_CHARGE_RETRY_SECONDS} s) must be below half of "
        f"CELERY_TASK_SOFT_TIME_LIMIT ({CELERY_TASK_SOFT_TIME_LIMIT} s)"
    )
CELERY_TASK_ACKS_LATE = True  # a task is acked after it ran, so a crash redelivers it
CELERY_TASK_REJECT_ON_WORKER_LOST = True  # a killed pool child puts its task back
CELERY_TASK_RETRY_ON_WORKER_LOST = True  # ... counted as a retry, so a poison task stops
CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # a worker holds one unacked task, not a batch
CELERY_WORKER_LOST_WAIT = 2.0  # notice a dead pool child in 2 s instead of 10
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Mail the console backend prints is for the person at the terminal: printed as it is, not logged.
CELERY_WORKER_REDIRECT_STDOUTS = FAKE_EMAIL_BACKENDS.get(EMAIL_BACKEND) != PRINTED
# Otherwise Celery closes the connection around every task, and a new PostgreSQL connection costs
# more than all of an advance's statements; config/celery_app.py recycles it as Django does.
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A web request that cannot reach the broker gives up fast; the sweep re-sends from the database.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}
BROKER_SOCKET_TIMEOUT = env.float("BROKER_SOCKET_TIMEOUT", 2.0, validate=Range(min=1.5))
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_VISIBILITY_TIMEOUT,
    "socket_timeout": BROKER_SOCKET_TIMEOUT,
    "socket_connect_timeout": BROKER_SOCKET_TIMEOUT,
    # Look for unacked messages of dead workers every 10 s, not every ~100 s.
    "unacked_restore_interval": 10,
    "unacked_restore_throttle": 1,
}
# Three queues, each with its own workers (Procfile): no kind of work waits behind another's.
CELERY_TASK_QUEUES = tuple(
    Queue(name, Exchange(name), routing_key=name) for name in ("threads", "intake", "housekeeping")
)
CELERY_TASK_DEFAULT_QUEUE = "threads"
CELERY_TASK_ROUTES = {
    "refunds.tasks.advance_ticket": {"queue": "threads"},
    "intake.tasks.take_message": {"queue": "intake"},
    "refunds.tasks.recover_tickets": {"queue": "housekeeping"},
    "refunds.tasks.escalate_overdue_reviews": {"queue": "housekeeping"},
    "refunds.tasks.resend_email": {"queue": "housekeeping"},
    "refunds.tasks.handle_stripe_event": {"queue": "housekeeping"},
    "refunds.tasks.reconcile_payments": {"queue": "housekeeping"},
    "webhooks.tasks.*": {"queue": "housekeeping"},
    "ops.tasks.*": {"queue": "housekeeping"},  # erasures and retention
}
# Exactly one beat sends: RedBeat's lock in Redis; a beat that loses it stands by (config/beat.py).
CELERY_BEAT_SCHEDULER = "config.beat.StandbyScheduler"
CELERY_BEAT_MAX_LOOP_INTERVAL = 1.0  # how often a waiting beat tries the lock
BEAT_LOCK_SECONDS = env.int("BEAT_LOCK_SECONDS", 30, validate=Range(min=5))
CELERY_REDBEAT_LOCK_TIMEOUT = BEAT_LOCK_SECONDS
CELERY_REDBEAT_KEY_PREFIX = "refunds:redbeat"
# kombu's redis+socket:// is a unix socket; redis-py, which RedBeat uses, calls it unix://.
_BEAT_REDIS = CELERY_BROKER_URL.replace("redis+socket://", "unix://", 1)
CELERY_REDBEAT_REDIS_URL = env_url(
    "REDBEAT_REDIS_URL",
    _BEAT_REDIS if CELERY_BROKER_URL.startswith("redis") else "",
    schemes=("redis", "rediss", "unix"),
)
if not CELERY_REDBEAT_REDIS_URL:
    raise BadSetting(
        "REDBEAT_REDIS_URL must name a Redis server (beat's one-beat lock) when "
        "CELERY_BROKER_URL is not Redis"
    )
# Said explicitly, so RedBeat does not hand the broker's transport options to its Redis client.
CELERY_REDBEAT_REDIS_OPTIONS = {"socket_timeout": 5, "socket_connect_timeout": 5}
# The queue's rendered cards (reviews/rows.py): an hour each, as the digest's minutes pile up keys.
CARDS_KEPT = 2000  # cards per process in memory: a desk's busiest queues, a few KB each
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    _CARDS_CACHE: dict[str, Any] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": CELERY_BROKER_URL,
        "KEY_PREFIX": "refunds:cards",
        # A Redis that hangs costs a page its cards' rendering, not the page (reviews/rows.py).
        "OPTIONS": {
            "socket_timeout": BROKER_SOCKET_TIMEOUT,
            "socket_connect_timeout": BROKER_SOCKET_TIMEOUT,
        },
    }
else:
    _CARDS_CACHE = {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "refunds-cards",
        "OPTIONS": {"MAX_ENTRIES": CARDS_KEPT},
    }
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "cards": {**_CARDS_CACHE, "TIMEOUT": 3600},
}

# --- The review desk -------------------------------------------------------------------------
REFUNDS_CLAIM_SECONDS = env.float("REFUNDS_CLAIM_SECONDS", 600.0, validate=Range(min=5.0))
REFUNDS_UNDO_SECONDS = env.float("REFUNDS_UNDO_SECONDS", 5.0, validate=Range(min=0.0))
REFUNDS_ASK_REMIND_DAYS = env.float("REFUNDS_ASK_REMIND_DAYS", 3.0, validate=Range(min=0.001))
REFUNDS_ASK_GIVE_UP_DAYS = env.float("REFUNDS_ASK_GIVE_UP_DAYS", 7.0, validate=Range(min=0.001))
if REFUNDS_ASK_GIVE_UP_DAYS <= REFUNDS_ASK_REMIND_DAYS:
    raise BadSetting(
        f"REFUNDS_ASK_GIVE_UP_DAYS ({REFUNDS_ASK_GIVE_UP_DAYS:g}) must be more than "
        f"REFUNDS_ASK_REMIND_DAYS ({REFUNDS_ASK_REMIND_DAYS:g})."
    )
REFUNDS_ASK_DEFAULT_OUTCOME = env.str(
    "REFUNDS_ASK_DEFAULT_OUTCOME", "queue", validate=OneOf(("queue", "close"))
)
# Refunds on return: when the review proposes one (reasons, from an amount in cents, or for a
# customer with this many refunds lately; empty: never), where the goods go, the wait's timer.
REFUNDS_RETURN_REASONS = env_list("REFUNDS_RETURN_REASONS", "wrong_item" if DEMO else "")
if _unknown := sorted(set(REFUNDS_RETURN_REASONS) - set(REASONS)):
    raise BadSetting(
        f"REFUNDS_RETURN_REASONS names no reason {_unknown[0]!r}; reasons are {', '.join(REASONS)}."
    )
REFUNDS_RETURN_FROM_CENTS = env.int("REFUNDS_RETURN_FROM_CENTS", None, validate=Range(min=1))
REFUNDS_RETURN_AFTER_REFUNDS = env.int("REFUNDS_RETURN_AFTER_REFUNDS", None, validate=Range(min=1))
REFUNDS_RETURN_ADDRESS = env.str(
    "REFUNDS_RETURN_ADDRESS", "Returns, Example Shop, 1 Warehouse Road, Springfield"
)
if not REFUNDS_RETURN_ADDRESS.strip():
    raise BadSetting(
        "REFUNDS_RETURN_ADDRESS is where customers send goods back: it cannot be empty."
    )
REFUNDS_RETURN_REMIND_DAYS = env.float(
    "REFUNDS_RETURN_REMIND_DAYS", 10.0, validate=Range(min=0.001)
)
REFUNDS_RETURN_GIVE_UP_DAYS = env.float(
    "REFUNDS_RETURN_GIVE_UP_DAYS", 21.0, validate=Range(min=0.001)
)
if REFUNDS_RETURN_GIVE_UP_DAYS <= REFUNDS_RETURN_REMIND_DAYS:
    raise BadSetting(
        f"REFUNDS_RETURN_GIVE_UP_DAYS ({REFUNDS_RETURN_GIVE_UP_DAYS:g}) must be more than "
        f"REFUNDS_RETURN_REMIND_DAYS ({REFUNDS_RETURN_REMIND_DAYS:g})."
    )
REFUNDS_RETURN_DEFAULT_OUTCOME = env.str(
    "REFUNDS_RETURN_DEFAULT_OUTCOME", "reject", validate=OneOf(("reject", "queue"))
)
# Store credit as the customer's choice (a bonus % on it); for these reasons the only way paid.
REFUNDS_STORE_CREDIT = env.bool("REFUNDS_STORE_CREDIT", DEMO)  # the demo shows it
REFUNDS_CREDIT_BONUS_PERCENT = env.int(
    "REFUNDS_CREDIT_BONUS_PERCENT", 0, validate=Range(min=0, max=100)
)
REFUNDS_CREDIT_ONLY_REASONS = env_list("REFUNDS_CREDIT_ONLY_REASONS", "")
if _unknown := sorted(set(REFUNDS_CREDIT_ONLY_REASONS) - set(REASONS)):
    raise BadSetting(
        f"REFUNDS_CREDIT_ONLY_REASONS names no reason {_unknown[0]!r}; reasons are "
        f"{', '.join(REASONS)}."
    )
REFUNDS_CREDIT_CHOOSE_DAYS = env.float(
    "REFUNDS_CREDIT_CHOOSE_DAYS", 14.0, validate=Range(min=0.001)
)
# Where customers' links point (the store credit offer's): the desk as customers reach it.
REFUNDS_PUBLIC_URL = env_url(
    "REFUNDS_PUBLIC_URL", "http://localhost:8000", schemes=("http", "https")
)
# The warehouse's or carrier's signed "received"/"flagged" (POST /webhooks/returns/); empty: off.
REFUNDS_RETURNS_WEBHOOK_SECRET = env.str("REFUNDS_RETURNS_WEBHOOK_SECRET", "")
REFUNDS_REPLY_ADDRESS = env.str("REFUNDS_REPLY_ADDRESS", "replies+{token}@desk.example.com")
if REFUNDS_REPLY_ADDRESS.count("{token}") != 1 or "@" not in REFUNDS_REPLY_ADDRESS.replace(
    "{token}", ""
):
    raise BadSetting(
        "REFUNDS_REPLY_ADDRESS must be an address with {token} once in it, like "
        f"replies+{{token}}@desk.example.com (got {REFUNDS_REPLY_ADDRESS!r})."
    )
REFUNDS_REVIEW_WARN_MINUTES = env.float(
    "REFUNDS_REVIEW_WARN_MINUTES", 15.0, validate=Range(min=0.1)
)
REFUNDS_REVIEW_ESCALATE_MINUTES = env.float(
    "REFUNDS_REVIEW_ESCALATE_MINUTES", 60.0, validate=Range(min=0.1)
)
if REFUNDS_REVIEW_ESCALATE_MINUTES <= REFUNDS_REVIEW_WARN_MINUTES:
    raise BadSetting(
        "REFUNDS_REVIEW_ESCALATE_MINUTES must be above REFUNDS_REVIEW_WARN_MINUTES "
        f"({REFUNDS_REVIEW_ESCALATE_MINUTES:g} <= {REFUNDS_REVIEW_WARN_MINUTES:g})"
    )
REFUNDS_TIMER_SECONDS = env.float("REFUNDS_TIMER_SECONDS", 60.0, validate=Range(min=1.0))

REFUNDS_RECONCILE_DAYS = env.float("REFUNDS_RECONCILE_DAYS", 14.0, validate=Range(min=0.1))
REFUNDS_RECONCILE_HOURS = env.float("REFUNDS_RECONCILE_HOURS", 24.0, validate=Range(min=0.1))
# Retention (ops/erasure.py, a beat job every REFUNDS_RETENTION_HOURS): the personal data of
# tickets ended this many days ago (0: kept until a customer asks), their attachments sooner.
REFUNDS_RETAIN_PERSONAL_DAYS = env.int("REFUNDS_RETAIN_PERSONAL_DAYS", 730, validate=Range(min=0))
REFUNDS_RETAIN_ATTACHMENTS_DAYS = env.int(
    "REFUNDS_RETAIN_ATTACHMENTS_DAYS", 180, validate=Range(min=1)
)
# Older checkpoints of threads finished this many days ago go (the last of each stays; 0: none).
REFUNDS_RETAIN_CHECKPOINTS_DAYS = env.int(
    "REFUNDS_RETAIN_CHECKPOINTS_DAYS", 30, validate=Range(min=0)
)
REFUNDS_RETENTION_HOURS = env.float("REFUNDS_RETENTION_HOURS", 24.0, validate=Range(min=0.1))
REFUNDS_RETENTION_BATCH = 500  # orders (and ticketless messages) per run; the next run goes on

# --- The queue's doorbell (the events process, reviews/doorbell.py) ---------------------------
# Where the queue page opens its server-sent events: the same origin behind a proxy that routes
# /queue/events/ to the events process (deploy/nginx.conf), or that process's own address.
REFUNDS_EVENTS_URL = env.str("REFUNDS_EVENTS_URL", "/queue/events/")
if not REFUNDS_EVENTS_URL.startswith(("/", "http://", "https://")):
    raise BadSetting(f"REFUNDS_EVENTS_URL must be a path or an http(s) URL: {REFUNDS_EVENTS_URL!r}")
if "://" in REFUNDS_EVENTS_URL:  # the page may connect there
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["connect-src"].append(
        "/".join(REFUNDS_EVENTS_URL.split("/")[:3])
    )
# Pages of these origins may read the events stream with their session cookie (CORS): the web
# process's own origin when the events process has another port (the demo without a proxy).
REFUNDS_EVENTS_ORIGINS = env_list("REFUNDS_EVENTS_ORIGINS", "")
# A comment down each quiet stream this often, before a proxy's idle timeout (nginx's 60 s).
REFUNDS_EVENTS_HEARTBEAT_SECONDS = env.float(
    "REFUNDS_EVENTS_HEARTBEAT_SECONDS", 15.0, validate=Range(min=0.1)
)

# --- The JSON API (Django REST framework, api/) --------------------------------------
API_RATE_PER_IP = env.str("API_RATE_PER_IP", "300/minute")
API_RATE_PER_TOKEN = env.str("API_RATE_PER_TOKEN", "120/minute")
API_MAX_BODY_BYTES = env.int("API_MAX_BODY_BYTES", 64 * 1024, validate=Range(min=1024))
API_ORDERS_MAX_BODY_BYTES = env.int(
    "API_ORDERS_MAX_BODY_BYTES", 1024 * 1024, validate=Range(min=1024)
)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttles.PerTokenThrottle"],
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Refund Desk API",
    "DESCRIPTION": "Open refund tickets and follow them to the end. See docs/integrations.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.request_bodies_required",
        "api.schema.null_as_openapi_3_0",
    ],
    "ENUM_NAME_OVERRIDES": {
        "TicketStatusEnum": "refunds.models.Ticket.Status",
        "ChargeStatusEnum": "refunds.models.Charge.Status",
        "EmailStatusEnum": "refunds.statuses.EmailStatus",
        "DecisionAnswerEnum": "refunds.models.Decision.Answer",
    },
}

# --- Webhooks (webhooks/) --------------------------------------------------------------------
WEBHOOK_TIMEOUT = env.float("WEBHOOK_TIMEOUT", 5.0, validate=Range(min=0.1))
WEBHOOK_MAX_ATTEMPTS = env.int("WEBHOOK_MAX_ATTEMPTS", 8, validate=Range(min=1))
WEBHOOK_RETRY_BASE_SECONDS = env.float("WEBHOOK_RETRY_BASE_SECONDS", 10.0, validate=Range(min=0.0))
WEBHOOK_SWEEP_SECONDS = env.float("WEBHOOK_SWEEP_SECONDS", 2.0, validate=Range(min=0.2))
WEBHOOK_SWEEP_THREADS = env.int("WEBHOOK_SWEEP_THREADS", 8, validate=Range(min=1))
WEBHOOK_SWEEP_BUDGET_SECONDS = env.float(
    "WEBHOOK_SWEEP_BUDGET_SECONDS", 30.0, validate=Range(min=1.0)
)
if WEBHOOK_SWEEP_BUDGET_SECONDS + WEBHOOK_TIMEOUT >= CELERY_TASK_SOFT_TIME_LIMIT:
    raise BadSetting(
        f"WEBHOOK_SWEEP_BUDGET_SECONDS + WEBHOOK_TIMEOUT ({WEBHOOK_SWEEP_BUDGET_SECONDS} + "
        f"{WEBHOOK_TIMEOUT} s) must be below CELERY_TASK_SOFT_TIME_LIMIT "
        f"({CELERY_TASK_SOFT_TIME_LIMIT} s)"
    )
WEBHOOK_ALLOW_HTTP = env.bool("WEBHOOK_ALLOW_HTTP", DEBUG)
WEBHOOK_ALLOW_PRIVATE = env.bool("WEBHOOK_ALLOW_PRIVATE", False)
CELERY_BEAT_SCHEDULE = {
    # A run still queued when the next one is due is dropped, not run late in a pile.
    name: {"task": task, "schedule": every, "options": {"expires": every}}
    for name, every, task in [
        ("recover-unfinished-threads", REFUNDS_SWEEP_SECONDS, "refunds.tasks.recover_tickets"),
        (
            "review-escalation-timers",
            REFUNDS_TIMER_SECONDS,
            "refunds.tasks.escalate_overdue_reviews",
        ),
        (
            "reconcile-with-the-processor",
            REFUNDS_RECONCILE_HOURS * 3600,
            "refunds.tasks.reconcile_payments",
        ),
        ("deliver-webhooks", WEBHOOK_SWEEP_SECONDS, "webhooks.tasks.deliver_webhooks"),
        ("retention", REFUNDS_RETENTION_HOURS * 3600, "ops.tasks.retention"),
    ]
}

# --- Health and metrics ----------------------------------------------------------------------
READYZ_TIMEOUT_SECONDS = env.float("READYZ_TIMEOUT_SECONDS", 1.0, validate=Range(min=0.1))
READYZ_SWEEP_LATE_SECONDS = env.float("READYZ_SWEEP_LATE_SECONDS", 120.0, validate=Range(min=1.0))
if READYZ_SWEEP_LATE_SECONDS <= REFUNDS_SWEEP_SECONDS + BEAT_LOCK_SECONDS:
    raise BadSetting(
        f"READYZ_SWEEP_LATE_SECONDS ({READYZ_SWEEP_LATE_SECONDS:g} s) must be above "
        f"REFUNDS_SWEEP_SECONDS + BEAT_LOCK_SECONDS ({REFUNDS_SWEEP_SECONDS:g} + "
        f"{BEAT_LOCK_SECONDS} s)"
    )
METRICS_TOKEN = env.str("METRICS_TOKEN", "")
PROMETHEUS_MULTIPROC_DIR = writable_dir(
    "PROMETHEUS_MULTIPROC_DIR", env.str("PROMETHEUS_MULTIPROC_DIR", str(DATA_DIR / "metrics"))
)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(PROMETHEUS_MULTIPROC_DIR)

# --- Errors and logs: secrets masked everywhere (config/masking.py) ---------------------------
DEFAULT_EXCEPTION_REPORTER = "core.masking.SafeReporter"
DEFAULT_EXCEPTION_REPORTER_FILTER = "core.masking.SafeFilter"
LOG_LEVEL = env.log_level("LOG_LEVEL", logging.INFO)
LOG_FORMAT = env.str("LOG_FORMAT", "text" if DEMO else "json", validate=OneOf(("json", "text")))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "core.logs.JsonFormatter"},
        "text": {"()": "core.logs.TextFormatter", "format": "%(levelname)s %(name)s %(message)s"},
    },
    "filters": {
        "refusals_in_one_line": {"()": "core.logs.RefusalsInOneLine"},
        "require_debug_false": {"()": "django.utils.log.RequireDebugFalse"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT},
        # Django's own, kept: a 500 emails settings.ADMINS outside DEBUG.
        "mail_admins": {
            "level": "ERROR",
            "filters": ["require_debug_false"],
            "class": "django.utils.log.AdminEmailHandler",
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Not Django's console handler under DEBUG too: every line twice in the demo.
        "django": {"handlers": ["mail_admins"], "level": "INFO"},
        "django.request": {"filters": ["refusals_in_one_line"]},
        "httpx": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
    },
}
