"""The OpenAPI 3 schema at /api/schema/ is valid, names every endpoint and method, and the docs
page serves Swagger UI from this server (no CDN) under the same Content-Security-Policy."""

from __future__ import annotations

import re

import yaml
from django.test import Client
from openapi_spec_validator import validate

from api import urls as api_urls
from api.models import ApiToken
from refunds.models import ORDER_NUMBER_PATTERN
from tests.conftest import make_order
from tests.reviewing import awaiting_review


def schema(client) -> dict:
    response = client.get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def test_the_schema_is_valid_openapi_3(client, db):
    spec = schema(client)
    assert spec["openapi"].startswith("3.")
    validate(spec)  # raises on any error


def test_the_schema_names_every_endpoint_and_method(client, db):
    paths = schema(client)["paths"]
    assert set(paths["/api/tickets/"]) >= {"get", "post"}
    assert set(paths["/api/tickets/{ticket_id}/"]) >= {"get"}
    assert paths["/api/tickets/"]["post"]["operationId"] == "tickets_open"
    api_routes = {p.name for p in api_urls.urlpatterns} - {"schema", "docs"}
    assert set(paths["/api/tickets/{ticket_id}/decision/"]) >= {"post"}
    assert set(paths["/api/orders/"]) >= {"post"}
    assert paths["/api/messages/"]["post"]["operationId"] == "messages_receive"
    assert paths["/api/erasures/"]["post"]["operationId"] == "erasures_request"
    assert set(paths["/api/erasures/{erasure_id}/"]) >= {"get"}
    assert paths["/api/returns/"]["post"]["operationId"] == "returns_arrived"
    assert paths["/api/returns/{reference}/"]["get"]["operationId"] == "returns_read"
    # each one named above (the erasures' two are routed in config/urls.py: ops/api.py)
    assert api_routes == {
        "tickets",
        "ticket",
        "ticket_decision",
        "orders",
        "messages",
        "returns",
        "return",
    }


def test_the_schema_documents_auth_errors_and_idempotency(client, db):
    spec = schema(client)
    schemes = spec["components"]["securitySchemes"]
    assert schemes["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["apiKey"]["description"],
    }
    post = spec["paths"]["/api/tickets/"]["post"]
    assert {"201", "400", "401", "409", "413", "415", "422", "429"} <= set(post["responses"])
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in post["parameters"])
    assert set(spec["components"]["schemas"]["Error"]["properties"]) >= {"status", "code", "error"}


def test_the_docs_page_loads_everything_from_here(client, db):
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(s.startswith("/") for s in sources), sources
    assert "<style" not in html and re.search(r"<script>", html) is None
    script = client.get("/api/docs/?script")
    assert script.status_code == 200 and b"SwaggerUIBundle" in script.content
    for asset in sources:
        assert client.get(asset.split("?")[0]).status_code == 200, asset


def test_the_schema_documents_order_numbers_beside_order_number(client, db):
    components = schema(client)["components"]["schemas"]
    body = components["TicketOpenRequest"]
    assert "required" not in body or "order_number" not in body["required"]  # one of the two
    several = body["properties"]["order_numbers"]
    assert several["type"] == "array" and several["minItems"] == 1 and several["maxItems"] == 20
    text, number = several["items"]["oneOf"]
    assert (text["type"], number["type"], number["maximum"]) == ("string", "integer", 10**30 - 1)
    assert text["pattern"] == ORDER_NUMBER_PATTERN  # what the code reads with, 32 at most
    assert body["oneOf"] == [{"required": ["order_number"]}, {"required": ["order_numbers"]}]
    assert body["additionalProperties"] is False
    read = components["TicketOut"]["properties"]["order_numbers"]
    assert read["type"] == "array"
    assert "order_number" in components["Error"]["properties"]  # on 409: which order


def test_each_refusal_the_server_answers_is_a_status_its_operation_documents(
    client, manager, settings, db
):
    """Schemathesis sends JSON within the size limit and asks for no page: these refusals are
    asked for here (the decision's 415, 413 and 422, the list's 404 past its last page)."""
    ticket = awaiting_review(make_order("1042"))
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(manager)[1]}"})
    url = f"/api/tickets/{ticket.pk}/decision/"
    another_order = {
        "interrupt_id": ticket.pending_interrupt_id,
        "answer": "approve",
        "orders": {"9999": {"answer": "approve"}},
    }
    too_long = "x" * (settings.API_MAX_BODY_BYTES + 1)
    decided = [
        api.post(url, {"answer": "approve"}),  # a form post
        api.post(url, too_long, content_type="application/json"),
        api.post(url, another_order, content_type="application/json"),
    ]
    assert [answer.status_code for answer in decided] == [415, 413, 422]
    spec = schema(client)
    paths = spec["paths"]
    assert {"415", "413", "422"} <= set(
        paths["/api/tickets/{ticket_id}/decision/"]["post"]["responses"]
    )
    assert api.get("/api/tickets/?page=9").status_code == 404
    assert "404" in paths["/api/tickets/"]["get"]["responses"]
    parts = spec["components"]["schemas"]["OrderAnswerIn"]["properties"]["parts"]
    assert "refused with 422" in parts["description"]  # as it is answered, not 400
