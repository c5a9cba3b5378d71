"""Settings from the environment, read by environs: a bad value stops the process at start with
one line that names the variable, not later as a confusing error deep inside a worker."""

import base64
import os
import sys
from collections.abc import Callable
from email.utils import getaddresses
from pathlib import Path
from typing import Any

import environs
from django.core.exceptions import ImproperlyConfigured

from core.modelspec import model_spec_error


class BadSetting(ImproperlyConfigured):
    """A setting from the environment has a bad value; the message names the variable."""


def exit_on_bad_setting() -> None:
    """Report an uncaught BadSetting as one line, not a stack trace into Django."""
    previous = sys.excepthook
    if getattr(previous, "refund_desk", False):
        return  # settings imported twice: one hook is enough

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, BadSetting):
            sys.stderr.write(f"Refund Desk cannot start: {exc}\n")
        elif _is_database_unreachable(exc):
            from core.masking import mask

            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            sys.stderr.write(
                f"Refund Desk cannot reach its database (DATABASE_URL): {mask(first)}\n"
            )
        else:
            previous(exc_type, exc, tb)

    hook.refund_desk = True  # type: ignore[attr-defined]
    sys.excepthook = hook


# What drivers say when a connection cannot be made at all (not an error on a live one).
_UNREACHABLE = (
    "unable to open database file",
    "connection failed",
    "could not connect",
    "could not translate host name",
    "connection refused",
    "timeout expired",
    "password authentication failed",
    "does not exist",
)


def _is_database_unreachable(exc: BaseException) -> bool:
    """Connecting failed (migrate against a PostgreSQL that is down): one line, no traceback."""
    from django.db.utils import OperationalError

    text = str(exc).lower()
    return isinstance(exc, OperationalError) and any(marker in text for marker in _UNREACHABLE)


def _naming(parse: Callable[..., Any]) -> Callable[..., Any]:
    """environs' refusal as a BadSetting (Django's ImproperlyConfigured) naming the variable."""

    def read(env: environs.Env, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return parse(env, name, *args, **kwargs)
        except environs.EnvValidationError as exc:
            said = exc.error_messages
            words = " ".join(said) if isinstance(said, list) else str(said)
            raise BadSetting(f"{name}={os.environ.get(name)!r}: {words}") from None

    return read


class Env(environs.Env):
    """environs' reader whose every refusal stops the start in one line (exit_on_bad_setting)."""


for _kind in ("bool", "int", "float", "str", "list", "dict", "json", "path", "url", "log_level"):
    setattr(Env, _kind, _naming(getattr(environs.Env, _kind)))

env = Env()


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env.str(name, default).split(",") if item.strip()]


def env_url(name: str, default: str, *, schemes: tuple[str, ...]) -> str:
    """A URL of one of `schemes`; empty where the default is empty (the setting is off)."""
    raw = env.str(name, default)
    if not raw and not default:
        return ""
    value = raw.strip()
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        allowed = ", ".join(f"{s}://" for s in schemes)
        # Name the scheme only: the rest of a database URL may hold a password.
        got = f"a {scheme}:// URL" if scheme else "a value without a scheme"
        raise BadSetting(f"{name} must start with one of {allowed}; got {got}")
    return value


def env_addresses(name: str, default: str) -> list[tuple[str, str]]:
    """Addresses as Django's ADMINS takes them: "ops@example.com,Ana <ana@example.com>"."""
    raw = env.str(name, default)
    if not raw.strip():
        return []
    found = getaddresses([raw])
    for _, address in found:
        local, at, domain = address.partition("@")
        if not (local and at and domain) or any(c.isspace() for c in address):
            raise BadSetting(
                f"{name} must be email addresses separated by commas, such as "
                f"'Ana <ana@example.com>,ops@example.com'; got {raw!r}"
            )
    return found


def writable_dir(name: str, path: str) -> Path:
    """A folder the process can write to, created if missing; anything else stops the start."""
    folder = Path(path).expanduser().resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadSetting(f"{name} ({folder}) cannot be created: {exc.strerror}") from None
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise BadSetting(f"{name} ({folder}) is not a folder this process can write to")
    return folder


def sqlite_file(name: str, path: str) -> None:
    """A SQLite database must live in a folder that exists: SQLite creates the file, not the
    folder, and says only "unable to open database file" much later."""
    if not path or path == ":memory:":
        return
    folder = Path(path).expanduser().parent
    if not folder.is_dir():
        raise BadSetting(f"{name} names a SQLite file in a folder that does not exist: {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadSetting(f"{name} names a SQLite file in a folder this process cannot write to")


def model_spec(name: str, value: str) -> str:
    """A chat model as init_chat_model names it ("openai:gpt-4.1-mini"), or empty for none."""
    value = value.strip()
    if error := model_spec_error(name, value):
        raise BadSetting(error)
    return value


def aes_keys(name: str, raw: str) -> list[bytes]:
    """AES-256 keys, urlsafe base64 of 32 random bytes each, separated by commas; empty: none."""
    keys = []
    for position, item in enumerate((i.strip() for i in raw.split(",") if i.strip()), start=1):
        try:
            key = base64.urlsafe_b64decode(item.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            key = b""
        if len(key) != 32:
            # Never echo a key, not even a broken one: say which one and what a good one is.
            raise BadSetting(
                f"{name}: key {position} is not urlsafe base64 of 32 bytes; make one with "
                'python -c "import secrets,base64;'
                'print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"'
            )
        keys.append(key)
    return keys
