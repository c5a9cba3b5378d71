from __future__ import annotations

import time
from collections import Counter

import pytest
import schemathesis
from django.contrib.auth.models import Group, User
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS, load_all_checks

from api.models import ApiToken
from tests.conftest import make_order
from tests.reviewing import awaiting_review


@pytest.fixture
def wsgi_app(db):
    for signal in (signals.request_started, signals.request_finished):
        signal.disconnect(close_old_connections)
    yield get_wsgi_application()
    for signal in (signals.request_started, signals.request_finished):
        signal.connect(close_old_connections)


@pytest.mark.parametrize("role", ["agent", "manager", "admin", "shop"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_explore(wsgi_app, agent, manager, admin_user, role, mode, monkeypatch):
    monkeypatch.setattr("refunds.enqueue.wake", lambda ticket_id: True)
    monkeypatch.setattr("refunds.enqueue.send", lambda task, row_id: True)
    shop = User.objects.create_user("shop")
    shop.groups.add(Group.objects.get(name="Shop integrations"))
    make_order("1042")
    awaiting_review(make_order("1045", fee_cents=4800, name="Dev Patel"), opened_by=agent)
    user = {"agent": agent, "manager": manager, "admin": admin_user, "shop": shop}[role]
    headers = {"Authorization": f"Token {ApiToken.issue(user)[1]}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/", wsgi_app)
    load_all_checks()
    checks = CHECKS.get_all()
    problems = Counter()
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=25, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case):
            case.call_and_validate(headers=headers, checks=checks)

        try:
            run()
        except BaseException as exc:
            with open(f"/tmp/apikeys/{role}-{mode.value}.log", "a") as f:
                f.write(f"==== {operation.method.upper()} {operation.path}\n{exc}\n")
                for sub in getattr(exc, 'exceptions', []):
                    f.write(f"  -- {sub}\n")
    print(role, mode, time.monotonic() - started)
    for k, v in problems.most_common():
        print(v, k)
