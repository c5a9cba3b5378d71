"""The API answers what its schema says, for every operation and every kind of caller:
schemathesis generates requests from /api/schema/, ones the schema allows and ones it does not,
and runs every check it has on each answer: no 500, status codes and bodies and headers as
documented, a request the schema allows is accepted, one it forbids is refused, a missing
required header or credentials refused. It runs against the WSGI application in this process,
a bounded number of examples per operation, so the whole file stays under a minute."""

from __future__ import annotations

from datetime import timedelta

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
from refunds import runner, services
from refunds.models import CustomerQuestion, Ticket
from refunds.services import asking
from tests.conftest import make_order
from tests.reviewing import advance_to_review, awaiting_review

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
def callers(db, no_broker, agent, manager, admin_user, settings) -> dict[str, User]:
    """Who calls the API with a key: the desk's three roles (a helpdesk acts with one of
    theirs) and the shop's integration user, which may push orders and nothing else. The desk
    holds a review, and two agent-level tickets every role of the desk reads whose answer came
    from no reviewer: the customer's reply, and the wait's "no reply"."""
    shop = User.objects.create_user("shop")
    shop.groups.add(Group.objects.get(name="Shop integrations"))
    make_order("1042")
    awaiting_review(make_order("1045", fee_cents=4800, name="Dev Patel"), opened_by=agent)
    replied = asked_the_customer(make_order("1046", name="Ben Okafor"), manager, agent)
    reply = asking.reply_record(question=replied, sender="ben@example.com", text="Photo sent")
    assert reply.resumed
    ended = asked_the_customer(make_order("1047", name="Cleo Ruiz"), manager, agent)
    later = ended.asked_at + timedelta(days=settings.REFUNDS_ASK_GIVE_UP_DAYS + 1)
    assert asking.questions_wait_timers(now=later)["ended"] == [ended.ticket_id]
    for question in (replied, ended):
        assert runner.advance(question.ticket_id) == "awaiting_review"
    return {"agent": agent, "manager": manager, "admin": admin_user, "shop": shop}


def asked_the_customer(order, opener, asker) -> CustomerQuestion:
    ticket = advance_to_review(services.ticket_open(order_number=order.number, opened_by=opener))
    services.ticket_ask(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=asker,
        question="Could you send a photo of the parcel?",
    )
    assert runner.advance(ticket.pk) == "awaiting_customer"
    return CustomerQuestion.objects.get(ticket=ticket)


@pytest.fixture
def no_broker(monkeypatch) -> None:
    monkeypatch.setattr("refunds.enqueue.wake", lambda ticket_id: True)
    monkeypatch.setattr("refunds.enqueue.send", lambda task, row_id: True)


@pytest.mark.parametrize("role", ROLES)
def test_every_operation_answers_as_its_schema_says(api_schema, callers, no_broker, role, settings):
    # The schema and the intake both read the limit; at the default 20,000 characters
    # schemathesis spends ~12 s per run preparing the message body's strategy.
    settings.INTAKE_MAX_CHARS = 1000
    # Some thousand requests a minute: the rate limits (test_api_errors) are not what is tested.
    settings.API_RATE_PER_IP = settings.API_RATE_PER_TOKEN = "100000/minute"
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
        "POST /api/erasures/",
        "GET /api/erasures/{erasure_id}/",
        "POST /api/returns/",
        "GET /api/returns/{reference}/",
    }
    # Random ids rarely name a ticket: the tickets there are asked for by their ids too.
    tickets = [{"ticket_id": pk} for pk in Ticket.objects.values_list("pk", flat=True)]
    for operation in operations:
        runs = [(GenerationMode.POSITIVE, {}), (GenerationMode.NEGATIVE, {})]
        if "{ticket_id}" in operation.path:
            runs += [(GenerationMode.POSITIVE, ticket) for ticket in tickets]
        for mode, path_parameters in runs:

            @hypothesis.settings(
                max_examples=EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(mode, path_parameters=path_parameters))
            def answers_as_documented(case) -> None:
                case.call_and_validate(headers=headers, checks=every_check)

            answers_as_documented()
