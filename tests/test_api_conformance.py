"""The API answers what its schema says, for every operation and every kind of caller:
schemathesis generates requests from /api/schema/, ones the schema allows and ones it does not,
and runs every check it has on each answer: no 500, status codes and bodies and headers as
documented, a request the schema allows is accepted, one it forbids is refused, a missing
required header or credentials refused. It runs against the WSGI application in this process,
a bounded number of examples per operation, so the whole file stays under a minute."""

from __future__ import annotations

import hypothesis
import pytest
import schemathesis
from django.contrib.auth.models import Group, User
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config import SchemathesisConfig

from api.models import ApiToken
from tests.conftest import make_order
from tests.reviewing import awaiting_review

EXAMPLES_PER_OPERATION = 10
# A request the schema allows may still be refused by the desk's state, never as malformed
# (400): 404 for a ticket that is not there, 409 for a review already answered, 422 for an
# order the desk does not have, a rule of the ticket's review, an Idempotency-Key used with
# another body. The rest of schemathesis' defaults stand.
ACCEPTED = ["2xx", "401", "403", "404", "409", "422", "429"]
ROLES = ["agent", "manager", "admin", "shop"]


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
    config = SchemathesisConfig.from_dict(
        {"checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}}}
    )
    return schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app, config=config)


@pytest.fixture
def callers(agent, manager, admin_user) -> dict[str, User]:
    """Who calls the API with a key: the desk's three roles (a helpdesk acts with one of
    theirs) and the shop's integration user, which may push orders and nothing else."""
    shop = User.objects.create_user("shop")
    shop.groups.add(Group.objects.get(name="Shop integrations"))
    make_order("1042")
    awaiting_review(make_order("1045", fee_cents=4800, name="Dev Patel"), opened_by=agent)
    return {"agent": agent, "manager": manager, "admin": admin_user, "shop": shop}


@pytest.fixture
def no_broker(monkeypatch) -> None:
    monkeypatch.setattr("refunds.enqueue.wake", lambda ticket_id: True)
    monkeypatch.setattr("refunds.enqueue.send", lambda task, row_id: True)


@pytest.mark.parametrize("role", ROLES)
def test_every_operation_answers_as_its_schema_says(api_schema, callers, no_broker, role, settings):
    # The schema and the intake both read the limit; at the default 20,000 characters
    # schemathesis spends ~12 s per run preparing the message body's strategy.
    settings.INTAKE_MAX_CHARS = 1000
    headers = {"Authorization": f"Token {ApiToken.issue(callers[role])[1]}"}
    load_all_checks()
    every_check = CHECKS.get_all()
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} == {
        "GET /api/tickets/",
        "POST /api/tickets/",
        "GET /api/tickets/{ticket_id}/",
        "POST /api/tickets/{ticket_id}/decision/",
        "POST /api/orders/",
        "POST /api/messages/",
    }
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @hypothesis.settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def answers_as_documented(case) -> None:
                case.call_and_validate(headers=headers, checks=every_check)

            answers_as_documented()
