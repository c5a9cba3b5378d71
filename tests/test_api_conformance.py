"""The API answers what its schema says, for every operation: schemathesis generates requests
from /api/schema/ (valid and invalid ones) and checks every answer against it: status codes
the schema names, bodies that match their schema, content types, no 500. It runs against the
WSGI application in this process, signed in with a support agent's key, a bounded number of
examples per operation so the whole run stays under a minute."""

from __future__ import annotations

import time

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from api.models import ApiToken
from tests.conftest import make_order
from tests.reviewing import awaiting_review

EXAMPLES_PER_OPERATION = 25
# Not checked: "a request the schema allows is accepted". A well-formed body may still name an
# order that does not exist or answer a review that is gone; those 400s and 409s are documented
# answers, and the checks below hold them to the schema like any other.


@pytest.fixture
def wsgi_app(db):
    """The real WSGI application, minus the connection closing at each request's start and end
    (Django's test client leaves it out the same way): the test's transaction stays open."""
    for signal in (signals.request_started, signals.request_finished):
        signal.disconnect(close_old_connections)
    yield get_wsgi_application()
    for signal in (signals.request_started, signals.request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def api_schema(wsgi_app):
    return schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)


@pytest.fixture
def signed_in(agent, manager) -> dict[str, str]:
    make_order("1042")
    awaiting_review(make_order("1045", fee_cents=4800, name="Dev Patel"), opened_by=agent)
    return {"Authorization": f"Token {ApiToken.issue(manager)[1]}"}


def test_every_operation_answers_as_its_schema_says(api_schema, signed_in, monkeypatch):
    monkeypatch.setattr("refunds.enqueue.wake", lambda ticket_id: True)  # no broker needed
    monkeypatch.setattr("refunds.enqueue.send", lambda task, row_id: True)
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} == {
        "GET /api/tickets/",
        "POST /api/tickets/",
        "GET /api/tickets/{ticket_id}/",
        "POST /api/tickets/{ticket_id}/decision/",
        "POST /api/orders/",
        "POST /api/messages/",
    }
    started = time.monotonic()
    for operation in operations:

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def answers_as_documented(case) -> None:
            case.call_and_validate(headers=signed_in, excluded_checks=[positive_data_acceptance])

        answers_as_documented()
    assert time.monotonic() - started < 60
