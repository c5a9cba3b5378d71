"""The desk's own not-found page, in the demo (DEBUG on) as in production."""

import pytest
from django.urls import reverse

from tests.conftest import make_order
from tests.reviewing import awaiting_review

FRIENDLY = "Nothing to show here"


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def test_a_ticket_outside_the_reviewers_scope_gets_the_desks_page(client, agent, debug):
    big = awaiting_review(make_order("1045", fee_cents=4800))  # a manager's review
    client.force_login(agent)
    response = client.get(reverse("reviews:ticket", args=[big.pk]))
    assert response.status_code == 404
    html = response.content.decode()
    assert FRIENDLY in html and "Back to the review queue" in html
    assert "URLconf" not in html and "Raised by" not in html
    assert 'name="viewport"' in html  # a phone sees it at its own width


def test_a_page_that_does_not_exist_gets_the_desks_page(client, agent, debug):
    client.force_login(agent)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert FRIENDLY in response.content.decode()


def test_the_api_keeps_its_own_not_found_answer(client, agent, debug):
    client.force_login(agent)
    response = client.get("/api/tickets/999999/")
    assert response.status_code in (401, 403, 404)
    assert FRIENDLY not in response.content.decode()
