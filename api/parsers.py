"""A JSON parser that answers 400 for every malformed body instead of failing later with a 500
(lone surrogates are valid JSON escapes, but not text a database stores)."""

from __future__ import annotations

import json
import math
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 20
MAX_NUMBER_DIGITS = 30


def _number(text: str) -> int | float:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ParseError(f"A number in the body is too long (over {MAX_NUMBER_DIGITS} digits).")
    if text.lstrip("-").isdigit():
        return int(text)
    number = float(text)
    if not math.isfinite(number):
        raise ParseError("A number in the body is out of range.")
    return number


def _no_constants(name: str) -> Any:
    raise ParseError(f"{name} is not valid JSON.")


def _check(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ParseError(f"The body is nested deeper than {MAX_DEPTH} levels.")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ParseError("The body holds a lone surrogate (\\ud800-\\udfff).") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check(key, depth + 1)
            _check(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check(item, depth + 1)


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError("The body is not valid JSON: it is not UTF-8 text.") from None
        try:
            data = json.loads(
                text,
                parse_int=_number,
                parse_float=_number,
                parse_constant=_no_constants,
            )
        except RecursionError:  # json.loads stops itself at the interpreter's recursion limit
            raise ParseError(f"The body is nested deeper than {MAX_DEPTH} levels.") from None
        except ValueError as exc:
            raise ParseError(f"The body is not valid JSON: {exc}.") from None
        _check(data)
        return data
