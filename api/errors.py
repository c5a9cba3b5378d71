"""One error shape for every status the API answers (api.answers.Error), and the guard in front
of it: a client reads one shape, whether DRF, Django's HTML pages or a 500 said no."""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from pydantic import ValidationError as BodyRefused
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

from api import limits
from core.addresses import client_address

log = logging.getLogger(__name__)
API_PREFIX = "/api/"
ORDERS_PREFIX = "/api/orders"  # bulk pushes: their own, larger body limit
DATABASE_UNAVAILABLE_MESSAGE = (
    "The database is unavailable for a moment; nothing was changed. Try again shortly."
)
CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "rate_limited",
    500: "server_error",
    503: "database_unavailable",
}
NON_FIELD = "non_field_errors"  # a message about the body as a whole
ORDER_SOURCE_RETRY_AFTER = 30  # seconds: the shop's systems, not ours, are down


def body(status_code: int, message: str, code: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "status": status_code,
        "code": code or CODES.get(status_code, HTTPStatus(status_code).phrase.lower()),
        "error": message,
        **extra,
    }


def error(status_code: int, message: str, code: str = "", **extra: Any) -> JsonResponse:
    return JsonResponse(body(status_code, message, code, **extra), status=status_code)


class Unprocessable(exceptions.APIException):
    status_code = 422
    default_code = "unprocessable"


class ShopUnavailable(exceptions.APIException):
    """The order source could not give the order the ticket names (refunds/order_source.py)."""

    status_code = 503
    default_code = "order_source_unavailable"


class PayloadTooLarge(exceptions.APIException):
    status_code = 413
    default_code = "payload_too_large"


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        found = []
        for key, value in detail.items():
            name = "" if key == NON_FIELD else f"{prefix}{key}"
            found += _flatten(value, f"{name}." if name else prefix)
        return found
    if isinstance(detail, list):
        return [m for item in detail for m in _flatten(item, prefix)]
    text = str(detail)
    return [f"{prefix.rstrip('.')}: {text}" if prefix and prefix.rstrip(".") not in text else text]


def _field_errors(refused: BodyRefused) -> dict[str, list[str]]:
    """pydantic's errors (api/bodies.py) by field path, in the API's words."""
    fields: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for problem in refused.errors():
        *parent, name = ("", *map(str, problem["loc"]))
        path = ".".join(map(str, problem["loc"]))
        kind = problem["type"]
        if kind == "extra_forbidden":
            unknown.setdefault(".".join(parent[1:]) or NON_FIELD, []).append(name)
            continue
        if kind == "missing":
            said = problem["msg"]
            words = said if said.startswith("Missing field:") else f"Missing field: {path}"
        elif kind in ("model_type", "dict_type"):
            words = f"{path} must be a JSON object" if path else "The body must be a JSON object."
        elif kind == "list_type":
            words = f"{path} must be a list"
        elif kind == "string_type":
            words = f"{path} must be a string"
        elif kind == "string_too_long":
            words = f"{path} is too long (at most {problem['ctx']['max_length']} characters)"
        elif kind == "value_error":
            words = str(problem["ctx"]["error"])
        else:
            words = problem["msg"]
        fields.setdefault(path or NON_FIELD, []).append(words)
    for path, names in unknown.items():
        fields.setdefault(path, []).append(f"Unknown field(s): {', '.join(sorted(names))}.")
    return fields


def _as_drf(exc: Exception) -> Exception:
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge("The request body is too large.")
    if isinstance(exc, BodyRefused):
        return exceptions.ValidationError(_field_errors(exc))
    return exc


def exception_handler(exc: Exception, context: dict) -> HttpResponse | None:
    exc = _as_drf(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a bug: Django's 500, rewritten to JSON by the guard below
    extra: dict[str, Any] = {}
    code = CODES.get(response.status_code, "error")
    if isinstance(exc, exceptions.ValidationError):
        messages = _flatten(exc.detail)
        message = " ".join(m if m.endswith(".") else f"{m}." for m in messages)
        extra["fields"] = exc.detail if isinstance(exc.detail, dict) else {}
        code = "invalid"
    elif isinstance(exc, exceptions.NotAuthenticated):
        message = "Authentication required: send 'Authorization: Bearer <key>' (or Token <key>)."
    elif isinstance(exc, exceptions.Throttled):
        message = f"Too many requests; try again in {response.get('Retry-After', '?')} s."
    else:
        message = str(getattr(exc, "detail", "") or exc)
        if isinstance(exc, exceptions.ParseError):
            code = "parse_error"
        elif isinstance(exc, ShopUnavailable):
            code = ShopUnavailable.default_code
            response["Retry-After"] = str(ORDER_SOURCE_RETRY_AFTER)
    response.data = body(response.status_code, message, code, **extra)
    return response


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


DEFAULT_MESSAGES = {
    400: "Bad request.",
    403: "Forbidden.",
    404: "There is nothing at this address.",
    405: "This method is not allowed here.",
    413: "The request body is too large.",
    500: "The server failed to answer this request; it was logged.",
    # config.middleware.DatabaseUnavailableMiddleware's page, for any view under /api/ (DRF
    # passes the database's errors on to it).
    503: DATABASE_UNAVAILABLE_MESSAGE,
}


def api_guard_middleware(get_response: Callable[[HttpRequest], HttpResponse]):
    def middleware(request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(API_PREFIX):
            return get_response(request)
        verdict = limits.hit(
            f"ip:{client_address(request)}", limits.Rate.parse(settings.API_RATE_PER_IP)
        )
        if not verdict.allowed:
            response: HttpResponse = error(
                429, f"Too many requests from this address; try again in {verdict.retry_after} s."
            )
            response["Retry-After"] = str(verdict.retry_after)
            return response
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return error(400, "The Content-Length header is not a number.")
        limit = (
            settings.API_ORDERS_MAX_BODY_BYTES
            if request.path.startswith(ORDERS_PREFIX)
            else settings.API_MAX_BODY_BYTES
        )
        if length > limit:
            return error(413, f"The request body is too large (at most {limit} bytes).")
        response = _no_store(get_response(request))
        if response.status_code >= 400 and not _is_json(response):
            code = response.status_code
            message = DEFAULT_MESSAGES.get(code, HTTPStatus(code).phrase + ".")
            if code == 403 and b"CSRF" in (getattr(response, "content", b"") or b""):
                message = "CSRF check failed; send the X-CSRFToken header."
            replaced = error(code, message)
            for header in ("Allow", "Retry-After", "WWW-Authenticate"):
                if header in response:
                    replaced[header] = response[header]
            return _no_store(replaced)
        return response

    return middleware


def _no_store(response: HttpResponse) -> HttpResponse:
    """API answers hold customers' names, addresses and money: no browser or proxy keeps one."""
    response["Cache-Control"] = "no-store"
    return response
