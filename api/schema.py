"""What drf-spectacular cannot infer for /api/schema/ (SPECTACULAR_SETTINGS' hooks)."""

from __future__ import annotations

from typing import Any


def request_bodies_required(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Every POST refuses an empty body (400), though TicketOpen has no required field."""
    for path in result["paths"].values():
        for operation in path.values():
            if "requestBody" in operation:
                operation["requestBody"]["required"] = True
    return result


NULL = {"type": "null"}


def null_as_openapi_3_0(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """pydantic writes "or null" as `anyOf` a null type (3.1); OpenAPI 3.0 says `nullable`."""

    def mend(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                mend(item)
        if not isinstance(node, dict):
            return
        if NULL in node.get("anyOf", []):
            rest = [option for option in node.pop("anyOf") if option != NULL]
            node.update(rest[0] if len(rest) == 1 and "$ref" not in rest[0] else {"anyOf": rest})
            node["nullable"] = True
        elif node.get("default", "") is None:
            del node["default"]  # a field left out is absent, not null
        for value in node.values():
            mend(value)

    mend(result)
    return result
