"""A staging box that runs on fakes (REFUNDS_ALLOW_FAKES) says so on every page of the desk."""

import pytest
from django.urls import reverse

FAKES = ["mail is printed, never sent", "refunds move no money (the demo gateway)"]


@pytest.mark.parametrize(
    "page", ["reviews:queue", "reviews:tickets", "reviews:ticket_new", "login"]
)
def test_every_page_shows_the_fakes_an_operator_allowed(client, agent, settings, page):
    settings.REFUNDS_FAKES_BANNER = FAKES
    if page != "login":
        client.force_login(agent)

    html = client.get(reverse(page)).content.decode()

    assert (
        "<strong>Not production:</strong> REFUNDS_ALLOW_FAKES is on, so mail is printed, never "
        "sent; refunds move no money (the demo gateway)." in html
    )


def test_a_desk_without_fakes_shows_no_banner(client, agent, settings):
    settings.REFUNDS_FAKES_BANNER = []
    client.force_login(agent)

    assert "fakes-banner" not in client.get(reverse("reviews:queue")).content.decode()
