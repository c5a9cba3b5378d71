"""Secrets stay out of error pages and logs: URL userinfo is masked in every string shown, and so
is the value of every secret this process was configured with (SECRET_VARIABLES)."""

from __future__ import annotations

import os
import re
from functools import cache
from typing import Any
from urllib.parse import unquote, urlsplit

from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

MASK = "********************"
USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/@\s'\"]+)@")
# Names whose values are never shown: Django's own list, plus every URL that may carry a password.
HIDDEN_NAMES = re.compile(
    r"API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|DATABASE_URL|BROKER|CHECKPOINT_URL|"
    r"DSN|AUTHORIZATION|CREDENTIAL",
    flags=re.IGNORECASE,
)
SECRET_VARIABLES = (
    "SECRET_KEY",
    "DATABASE_URL",
    "CHECKPOINT_URL",
    "CELERY_BROKER_URL",
    "EMAIL_HOST_PASSWORD",
    "ANYMAIL_WEBHOOK_SECRET",
    "REFUNDS_ORDER_SOURCE_TOKEN",
    "METRICS_TOKEN",
    "STRIPE_SECRET_KEY",
    "STRIPE_WEBHOOK_SECRET",
    "REFUNDS_SHOP_WEBHOOK_SECRET",
    "REFUNDS_MODEL_API_KEY",
)


def _configured(name: str) -> str:
    from django.conf import settings

    value = os.environ.get(name, "")
    if not value and settings.configured:
        value = str(getattr(settings, name, "") or "")
    return value


@cache
def _secrets_in(values: tuple[str, ...]) -> tuple[str, ...]:
    """The secret strings among these settings, longest first (a password inside a URL)."""
    found: set[str] = set()
    for value in values:
        if "://" in value:
            password = urlsplit(value).password
            if password:
                found.update({password, unquote(password)})
        elif len(value) >= 8:
            found.add(value)
    return tuple(sorted((v for v in found if len(v) >= 4), key=len, reverse=True))


def mask(text: str) -> str:
    """`text` with URL credentials and known secret values replaced by asterisks."""
    if not text:
        return text
    if type(text) is not str:  # a SafeString, or a lazy object that passes for a str
        text = str(text)
    text = USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    for secret in _secrets_in(tuple(map(_configured, SECRET_VARIABLES))):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def mask_value(value: Any) -> Any:
    """Mask strings inside any structure an error page renders (dicts, lists, tuples)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {k: mask_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(mask_value(v) for v in value)
    return value


class SafeFilter(SafeExceptionReporterFilter):
    """Django's filter, hiding more names and masking every shown value."""

    hidden_settings = HIDDEN_NAMES

    def cleanse_setting(self, key, value):
        return mask_value(super().cleanse_setting(key, value))

    def get_traceback_frame_variables(self, request, tb_frame):
        variables = super().get_traceback_frame_variables(request, tb_frame)
        return [
            (name, MASK if HIDDEN_NAMES.search(str(name)) else _mask_repr(value))
            for name, value in variables
        ]


def _mask_repr(value: Any) -> Any:
    # Frame variables are shown through their repr; a repr that holds a secret is replaced whole.
    try:
        text = repr(value) if not isinstance(value, str) else value
    except Exception as exc:  # a half-made object's: the report goes out all the same
        return mask(f"Error in formatting: {exc.__class__.__name__}: {exc}")  # Django's words
    masked = mask(text)
    return value if masked == text else masked


class SafeReporter(ExceptionReporter):
    """Django's debug page, every string through mask(): a database error may quote its URL."""

    def get_traceback_data(self):
        return mask_value(super().get_traceback_data())
