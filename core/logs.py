"""Logs as JSON lines carrying the request, ticket and thread ids of whatever the process is
doing (context variables, `bound(...)`), masked like error pages."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import pythonjsonlogger.json
from django.http import HttpRequest, HttpResponse

from core.masking import mask

CONTEXT: ContextVar[dict[str, Any]] = ContextVar("refund_desk_log_context", default={})  # noqa: B039


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Add fields to every log record made inside the block (in this thread or task)."""
    token = CONTEXT.set({**CONTEXT.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        CONTEXT.reset(token)


class JsonFormatter(pythonjsonlogger.json.JsonFormatter):
    """python-json-logger's, with our keys and clock, the bound ids, and every value masked."""

    converter = staticmethod(time.gmtime)
    default_time_format, default_msec_format = "%Y-%m-%dT%H:%M:%S", "%s.%03dZ"

    def __init__(self) -> None:
        names = {"asctime": "time", "levelname": "level", "name": "logger", "exc_info": "exception"}
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s", rename_fields=names)

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        log_data |= {"level": log_data["level"].lower(), **CONTEXT.get()}
        plain = int | float | bool | None
        return {k: v if isinstance(v, plain) else mask(str(v)) for k, v in log_data.items()}


class TextFormatter(logging.Formatter):
    """For a person at a terminal (LOG_FORMAT=text): the same fields, masked, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        context = " ".join(f"{k}={v}" for k, v in CONTEXT.get().items())
        line = super().format(record)
        return mask(f"{line} {context}".rstrip())


class RefusalsInOneLine(logging.Filter):
    """A 4xx that Django logs (django.request: PermissionDenied, a bad request) is the desk
    refusing someone, not a fault in it: one line with the refusal's words, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500 and record.exc_info:
            words = str(record.exc_info[1] or "").strip()
            record.msg, record.args = record.getMessage() + (f": {words}" if words else ""), None
            record.exc_info, record.exc_text = None, None
        return True


def request_id_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    """Every request has an id (the proxy's, when sane): its log lines and response carry it."""

    def middleware(request: HttpRequest) -> HttpResponse:
        given = request.headers.get("X-Request-ID", "")
        request_id = given if 0 < len(given) <= 64 and given.isprintable() else uuid.uuid4().hex
        request.request_id = request_id  # type: ignore[attr-defined]
        with bound(request_id=request_id):
            response = get_response(request)
        response["X-Request-ID"] = request_id
        return response

    return middleware


# An address anywhere in a URL: user@host, also percent-encoded (%40) in a query string.
EMAIL_IN_URL = re.compile(r"[^\s/?&=@%]+(?:@|%40)[^\s/?&=]+", re.IGNORECASE)


def mask_emails(text: str) -> str:
    """Customers' addresses out of a URL: "/customers/ana@example.com/" -> "/customers/***@…/"."""
    return EMAIL_IN_URL.sub("***@…", text)


def access_line(atoms: Mapping[str, Any], *, words: bool = False) -> str:
    """gunicorn's access line for one request: its request id, no customer's address; JSON, or
    with `words` as a person reads it ("GET /reviews/ 200 in 12.5 ms, request 1f2e...")."""
    query = str(atoms.get("q") or "")
    entry: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "level": "info",
        "logger": "gunicorn.access",
        "method": atoms.get("m"),
        "path": mask(mask_emails(str(atoms.get("U") or ""))),
        "query": mask(mask_emails(query)) if query else "",
        "status": int(str(atoms.get("s") or 0)),
        "bytes": atoms.get("B") or 0,
        "duration_ms": round(int(atoms.get("D") or 0) / 1000, 1),
        "remote_addr": atoms.get("h"),
        "user_agent": str(atoms.get("a") or "")[:200],
        "request_id": atoms.get("{x-request-id}o") or "",
    }
    if words:
        query = f"?{entry['query']}" if entry["query"] else ""
        said = f"{entry['method']} {entry['path']}{query} {entry['status']} in "
        return said + f"{entry['duration_ms']} ms, request {entry['request_id'] or 'unnamed'}"
    return json.dumps(entry, default=str)
