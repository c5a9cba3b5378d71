"""refunds/policy.py: the agent limit and its words have one home, and the setting moves them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.urls import reverse

from refunds import permissions, policy, runner, services
from refunds.models import Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", "var", "tests", "migrations", "static", "node_modules", ".git"}
# The default limit as a person or a program would write it: "$20", "$20.00", "20.00", 20_00,
# or 2000 next to a word about who reviews.
SPELLED = re.compile(r"\$20\b|\b20\.00\b|\b20_00\b")
SPELLED_CENTS = re.compile(r"\b2000\b")
ABOUT_REVIEWERS = re.compile(r"limit|agent|manager|role|review", re.IGNORECASE)


def test_the_default_limit_is_spelled_only_in_policy():
    found = []
    for path in sorted(ROOT.rglob("*")):
        parts = set(path.relative_to(ROOT).parts)
        if SKIP & parts or path.suffix not in {".py", ".html", ".txt"} or not path.is_file():
            continue
        if path == ROOT / "refunds" / "policy.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            cents = SPELLED_CENTS.search(line) and ABOUT_REVIEWERS.search(line)
            if SPELLED.search(line) or cents:
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == [], "the agent limit belongs in refunds/policy.py:\n" + "\n".join(found)


def test_the_grep_test_would_see_a_copy():
    assert SPELLED.search('"over $20.00"') and SPELLED.search("limit = 20_00")
    line = "AGENT_LIMIT_CENTS = 2000"
    assert SPELLED_CENTS.search(line) and ABOUT_REVIEWERS.search(line)


def test_the_words_follow_the_limit_in_force(settings):
    assert policy.within_words() == "$20.00 or less" and policy.over_words() == "over $20.00"
    settings.REFUNDS_AGENT_LIMIT_CENTS = 5000
    assert policy.within_words() == "$50.00 or less" and policy.over_words() == "over $50.00"


@pytest.mark.parametrize(
    ("amount", "flagged", "role"),
    [(2000, False, "agent"), (2001, False, "manager"), (699, True, "manager"), (1, False, "agent")],
)
def test_it_sends_a_refund_over_the_limit_or_flagged_to_a_manager(amount, flagged, role):
    assert policy.review_role(amount, flagged=flagged, limit_cents=2000) == role


@pytest.mark.parametrize("bad", [0, -5, "5000", 12.5, True])
def test_a_bad_limit_stops_with_the_settings_name(settings, bad):
    settings.REFUNDS_AGENT_LIMIT_CENTS = bad
    with pytest.raises(ImproperlyConfigured, match="REFUNDS_AGENT_LIMIT_CENTS"):
        policy.agent_limit_cents()


@override_settings(REFUNDS_AGENT_LIMIT_CENTS=5000)
def test_with_a_fifty_dollar_limit_a_48_dollar_refund_goes_to_agents(
    transactional_db, client, agent, big_order
):
    ticket = services.ticket_open(order_number=big_order.number)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert (ticket.required_role, ticket.amount_cents) == ("agent", 4800)
    assert "Refund of $48.00 is $50.00 or less: agent review." in ticket.pending_payload["notes"]

    client.force_login(agent)
    response = client.get(reverse("reviews:queue"))
    assert ticket in response.context["reviews"]
    assert b"You decide refunds of $50.00 or less" in response.content


@override_settings(REFUNDS_AGENT_LIMIT_CENTS=5000)
def test_with_a_fifty_dollar_limit_the_pages_say_so(client, agent, manager, admin_user, db):
    over = awaiting_review(make_order("1050", fee_cents=6000))
    assert over.required_role == "manager"
    client.force_login(manager)
    response = client.get(reverse("reviews:queue"))
    assert b"You decide refunds over $50.00" in response.content
    refusal = permissions.decision_refusal(agent, Ticket.objects.get(pk=over.pk))
    assert (
        refusal == "This refund is decided by a manager (it is over $50.00 or flagged by policy)."
    )


@override_settings(REFUNDS_AGENT_LIMIT_CENTS=5000)
def test_with_a_fifty_dollar_limit_the_fork_preview_sends_45_dollars_to_an_agent(
    client, transactional_db, admin_user, monkeypatch
):
    from refunds import enqueue, forks
    from tests.reviewing import advance_to_review

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # the test advances by hand
    make_order("1050", fee_cents=6000)
    ticket = advance_to_review(services.ticket_open(order_number="1050"))
    checkpoint = forks.fork_base(ticket.thread_id).config["configurable"]["checkpoint_id"]
    client.force_login(admin_user)
    form = {"checkpoint": checkpoint, "amount": "45", "reason": "x", "preview": "1"}
    response = client.post(reverse("ops:fork", args=[ticket.pk]), form)
    assert b"$45.00 goes to a support agent" in response.content


@override_settings(REFUNDS_AGENT_LIMIT_CENTS=5000)
def test_with_a_fifty_dollar_limit_the_api_schema_says_so(client, db):
    response = client.get("/api/schema/")
    assert b"`agent` for $50.00 or less" in response.content


def test_the_graph_stays_django_free_with_the_policy_and_the_clock():
    import subprocess
    import sys

    code = (
        "import sys, refunds.flow.graph; "
        "print(any(m.split('.')[0] == 'django' for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
