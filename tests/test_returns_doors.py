"""The doors the warehouse's word on a return comes through: the JSON API, a signed webhook, the
returns page the shop's staff scan parcels into, and `manage.py demo_return`. Each calls the one
service (refunds.services.return_arrived): a right word resumes the ticket's wait, the same word
again changes nothing, and a wrong one is refused in words with nothing changed."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from api.models import ApiToken
from refunds import runner
from refunds.flow.nodes.returns import return_reference
from refunds.models import ChargePart, Decision, ReturnRequest, Ticket
from tests.conftest import helpdesk
from tests.test_browser_desk import browser  # noqa: F401 (fixture)
from tests.test_returns import no_broker, shirt_line, shirts, waiting_return  # noqa: F401

SECRET = "whsec_returns_test"
API = "/api/returns/"
WEBHOOK = "/webhooks/returns/"
PAGE = "/returns/"
NO_SUCH = return_reference(987654)  # well made, of no return


@pytest.fixture
def waiting(transactional_db, colleague, manager, shirts) -> ReturnRequest:  # noqa: F811
    """Ana's shirts (3) and scarf (1), approved on return: the ticket waits for them."""
    return ReturnRequest.objects.get(ticket=waiting_return(shirts, colleague, manager))


def nothing_changed(found: ReturnRequest) -> None:
    found.refresh_from_db()
    assert found.arrived is None and found.arrived_at is None and found.early is None
    assert not Decision.objects.filter(ticket_id=found.ticket_id, answer="received").exists()
    assert not Decision.objects.filter(ticket_id=found.ticket_id, answer="flagged").exists()
    assert Ticket.objects.get(pk=found.ticket_id).status == "awaiting_return"


# --- the JSON API -----------------------------------------------------------------------------
def api(user: User) -> Client:
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(user)[1]}"})


def said(client: Client, body) -> dict:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(API, data=raw, content_type="application/json")


def test_the_api_takes_the_warehouses_received_and_the_ticket_refunds_what_came_back(
    waiting,
    agent,
    shirts,  # noqa: F811
):
    body = {
        "reference": waiting.reference,
        "status": "received",
        "lines": [{"line": shirt_line(shirts), "quantity": 2}, {"sku": "SKU-2", "quantity": 0}],
    }
    response = said(api(agent), body)
    assert response.status_code == 201, response.content
    assert response.json() == {
        "ticket": waiting.ticket_id,
        "reference": waiting.reference,
        "outcome": "recorded",
    }
    again = said(api(agent), body)  # a client's retry
    assert again.status_code == 200 and again.json()["outcome"] == "already"
    assert runner.advance(waiting.ticket_id) == "refunded"
    (part,) = ChargePart.objects.filter(charge__ticket_id=waiting.ticket_id)
    assert (part.line_id, part.quantity, part.amount_cents) == (shirt_line(shirts), 2, 4000)
    decision = Decision.objects.get(ticket_id=waiting.ticket_id, answer="received")
    assert decision.reviewer == agent


def test_the_api_takes_a_flag_by_sku_and_order_and_a_manager_decides_again(waiting, manager):
    flagged = {"reference": waiting.reference, "status": "flagged", "reason": "Box empty"}
    response = said(api(manager), flagged)
    assert response.status_code == 201 and response.json()["outcome"] == "recorded"
    assert runner.advance(waiting.ticket_id) == "awaiting_review"
    assert Ticket.objects.get(pk=waiting.ticket_id).required_role == "manager"


@pytest.mark.parametrize(
    ("change", "status", "words"),
    [
        ({"reference": "RT-99-00"}, 422, "is not a return reference"),
        ({"reference": NO_SUCH}, 422, f"No return has the reference {NO_SUCH}"),
        ({"lines": [{"sku": "SKU-1", "quantity": 4}]}, 422, "3 were asked back"),
        ({"lines": [{"line": 999999, "quantity": 1}]}, 422, "was not asked back"),
        ({"lines": [{"sku": "SKU-1", "quantity": 1, "order": "9999"}]}, 422, "not 9999"),
        ({"lines": [{"sku": "SKU-1", "quantity": 0}]}, 422, "nothing came back"),
        ({"status": "flagged"}, 422, "Say why the return is flagged"),
        (
            {"status": "flagged", "reason": "torn", "lines": [{"sku": "SKU-1", "quantity": 1}]},
            422,
            "carries a reason, not lines",
        ),
        ({"status": "lost"}, 400, "status"),
        ({"lines": [{"quantity": 1}]}, 400, "its id (line) or its SKU"),
        ({"lines": [{"line": 1, "sku": "SKU-1", "quantity": 1}]}, 400, "one of the two"),
        ({"lines": [{"line": 1, "quantity": "2"}]}, 400, "whole number"),
        ({"lines": []}, 400, "lines"),
        ({"colour": "red"}, 400, "Unknown field"),
    ],
)
def test_a_wrong_word_by_the_api_is_refused_in_words_and_changes_nothing(
    waiting, agent, change, status, words
):
    body = {"reference": waiting.reference, "status": "received"} | change
    response = said(api(agent), body)
    assert response.status_code == status, response.content
    assert words in response.json()["error"], response.json()
    assert response.json()["status"] == status  # the API's one error shape
    nothing_changed(waiting)


def test_a_different_word_on_a_settled_return_is_refused(waiting, agent):
    first = said(api(agent), {"reference": waiting.reference, "status": "received"})
    assert first.status_code == 201
    flag = {"reference": waiting.reference, "status": "flagged", "reason": "Box empty"}
    response = said(api(agent), flag)
    assert response.status_code == 422
    assert "recorded as received already" in response.json()["error"]


def test_only_desk_users_say_or_read_what_came_back_by_the_api(waiting, agent):
    outsider = api(helpdesk())  # in no desk group
    response = said(outsider, {"reference": waiting.reference, "status": "received"})
    assert response.status_code == 403 and "no desk group" in response.json()["error"]
    assert outsider.get(f"{API}{waiting.reference}/").status_code == 403
    assert Client().post(API, data={}, content_type="application/json").status_code == 401
    nothing_changed(waiting)


def test_the_api_shows_a_return_its_lines_and_what_came_back(waiting, agent, shirts):  # noqa: F811
    client = api(agent)
    before = client.get(f"{API}{waiting.reference.lower()}/")  # as typed
    assert before.status_code == 200, before.content
    shown = before.json()
    assert (shown["reference"], shown["ticket"], shown["status"]) == (
        waiting.reference,
        waiting.ticket_id,
        "waiting",
    )
    assert [(x["title"], x["quantity"], x["came_back"]) for x in shown["lines"]] == [
        ("Linen shirt", 3, None),
        ("Silk scarf", 1, None),
    ]
    line = {"line": shirt_line(shirts), "quantity": 1}
    said(client, {"reference": waiting.reference, "status": "received", "lines": [line]})
    after = client.get(f"{API}{waiting.reference}/").json()
    assert after["status"] == "received" and after["arrived_at"]
    assert [x["came_back"] for x in after["lines"]] == [1, 0]
    missing = client.get(f"{API}{NO_SUCH}/")
    assert missing.status_code == 404 and "No return has" in missing.json()["error"]


# --- the signed webhook -----------------------------------------------------------------------
@pytest.fixture
def secret(settings) -> str:
    settings.REFUNDS_RETURNS_WEBHOOK_SECRET = SECRET
    return SECRET


def delivered(body, *, secret: str | None = SECRET, raw: bytes | None = None, header=None):
    from webhooks import signing

    raw = raw if raw is not None else json.dumps(body).encode()
    headers = {}
    if secret is not None:
        headers[signing.HEADER] = header or signing.sign(secret, raw)
    return Client().post(WEBHOOK, data=raw, content_type="application/json", headers=headers)


def test_a_signed_received_resumes_the_wait_and_the_same_delivery_again_is_harmless(
    waiting, secret, caplog
):
    from webhooks import signing

    raw = json.dumps({"reference": waiting.reference, "status": "received"}).encode()
    header = signing.sign(secret, raw)
    first = delivered(None, raw=raw, header=header)
    assert first.status_code == 200, first.content
    assert first.json() == {
        "ticket": waiting.ticket_id,
        "reference": waiting.reference,
        "outcome": "recorded",
    }
    replay = delivered(None, raw=raw, header=header)  # the warehouse's retry, byte for byte
    assert replay.status_code == 200 and replay.json()["outcome"] == "already"
    assert Decision.objects.filter(ticket_id=waiting.ticket_id, answer="received").count() == 1
    assert runner.advance(waiting.ticket_id) == "refunded"
    assert f"return {waiting.reference}: received by the webhook" in caplog.text


def test_an_unsigned_or_wrongly_signed_delivery_changes_nothing(waiting, secret):
    body = {"reference": waiting.reference, "status": "received"}
    missing = delivered(body, secret=None)
    assert missing.status_code == 401 and "header is missing" in missing.json()["error"]
    wrong = delivered(body, secret="another warehouse's secret")
    assert wrong.status_code == 401 and "does not check out" in wrong.json()["error"]
    raw = json.dumps(body).encode()
    from webhooks import signing

    stale = delivered(None, raw=raw, header=signing.sign(secret, raw, timestamp=1_000_000_000))
    assert stale.status_code == 401 and "tolerance" in stale.json()["error"]
    tampered = delivered(
        None,
        raw=raw.replace(b"received", b"flagged!"),
        header=signing.sign(secret, raw),
    )
    assert tampered.status_code == 401
    nothing_changed(waiting)


@pytest.mark.parametrize(
    ("raw", "status", "words"),
    [
        (b'{"reference": "RT-', 400, "Not a return's word"),
        (b'{"status": "received"}', 400, "reference: Field required"),
        (
            f'{{"reference": "{NO_SUCH}", "status": "received"}}'.encode(),
            422,
            "No return has the reference",
        ),
    ],
)
def test_a_signed_delivery_the_desk_cannot_take_says_why_and_changes_nothing(
    waiting, secret, raw, status, words
):
    response = delivered(None, raw=raw)
    assert response.status_code == status, response.content
    assert words in response.json()["error"]
    nothing_changed(waiting)


def test_without_the_secret_there_is_no_returns_webhook(waiting, settings):
    settings.REFUNDS_RETURNS_WEBHOOK_SECRET = ""
    response = delivered({"reference": waiting.reference, "status": "received"}, secret="")
    assert response.status_code == 404
    nothing_changed(waiting)


# --- the returns page -------------------------------------------------------------------------
@pytest.fixture
def desk(agent) -> Client:
    client = Client()
    client.force_login(agent)
    return client


def test_the_page_finds_a_scanned_reference_and_shows_its_lines_to_count(waiting, desk):
    page = desk.get(PAGE).content.decode()
    assert 'name="reference"' in page and "autofocus" in page
    assert f'href="{PAGE}" id="nav-returns"' in page  # in the menu
    found = desk.get(PAGE, {"reference": f" {waiting.reference.lower()} "}).content.decode()
    assert f"Return {waiting.reference}" in found and "Waiting for the goods" in found
    assert "Linen shirt" in found and "Silk scarf" in found
    assert 'value="3"' in found and 'value="1"' in found  # each box: all asked back
    assert 'name="received"' in found and 'name="flagged"' in found


def test_the_page_records_what_came_back_and_says_so(waiting, desk, shirts):  # noqa: F811
    shirt = shirt_line(shirts)
    scarf = shirts.lines.get(title="Silk scarf").pk
    fields = {"reference": waiting.reference, "received": "1"}
    fields |= {f"back-2001-{shirt}": "2", f"back-2001-{scarf}": "0"}
    response = desk.post(PAGE, fields, follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert f"Return {waiting.reference} received: ticket {waiting.ticket_id} refunds" in page
    assert "Received " in page and 'name="received"' not in page  # settled: no buttons
    assert runner.advance(waiting.ticket_id) == "refunded"
    (part,) = ChargePart.objects.filter(charge__ticket_id=waiting.ticket_id)
    assert (part.line_id, part.quantity) == (shirt, 2)


def test_the_page_flags_a_return_by_htmx_with_the_reason(waiting, desk):
    fields = {"reference": waiting.reference, "flagged": "1", "reason": "Seal cut, box empty"}
    response = desk.post(PAGE, fields, headers={"HX-Request": "true"})
    assert response.status_code == 200
    fragment = response.content.decode()
    assert "<html" not in fragment and 'id="returns"' in fragment
    assert "goes back to a manager" in fragment and "Seal cut, box empty" in fragment
    decision = Decision.objects.get(ticket_id=waiting.ticket_id, answer="flagged")
    assert decision.reason == "Seal cut, box empty"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"reference": "RT-99-00", "received": "1"}, "is not a return reference"),
        ({"flagged": "1"}, "Say why the return is flagged"),
        ({"received": "1", "back": "4"}, "3 were asked back"),
        ({"received": "1", "back": "two"}, "Linen shirt: type how many came back"),
        ({"received": "1", "back": "0", "scarf": "0"}, "nothing came back"),
        ({}, "Press Received or Flagged"),
    ],
)
def test_a_wrong_word_on_the_page_shows_why_in_the_form_and_changes_nothing(
    waiting,
    desk,
    shirts,  # noqa: F811
    fields,
    words,
):
    form = {"reference": waiting.reference} | fields
    if "back" in form:
        form[f"back-2001-{shirt_line(shirts)}"] = form.pop("back")
    if "scarf" in form:
        form[f"back-2001-{shirts.lines.get(title='Silk scarf').pk}"] = form.pop("scarf")
    response = desk.post(PAGE, form)
    assert response.status_code == 400
    page = response.content.decode()
    assert words in page and 'role="alert"' in page and "Traceback" not in page
    nothing_changed(waiting)


def test_a_reference_that_names_no_return_is_said_on_the_page(waiting, desk):
    page = desk.get(PAGE, {"reference": NO_SUCH}).content.decode()
    assert f"No return has the reference {NO_SUCH}" in page
    assert f'value="{NO_SUCH}"' in page  # left in the box, to be mended


def test_only_desk_users_open_the_returns_page(waiting):
    outsider = Client()
    outsider.force_login(helpdesk())
    assert outsider.get(PAGE).status_code == 403
    form = {"reference": waiting.reference, "received": "1"}
    assert outsider.post(PAGE, form).status_code == 403
    assert Client().get(PAGE).status_code == 302  # to the login
    nothing_changed(waiting)


def test_the_ticket_page_says_it_waits_for_the_goods_and_links_the_returns_page(waiting, manager):
    desk = Client()
    desk.force_login(manager)  # a manager's ticket: over the agents' limit
    page = desk.get(reverse("reviews:ticket", args=[waiting.ticket_id])).content.decode()
    assert "Waiting for the goods since" in page and waiting.reference in page
    assert "3 x Linen shirt" in page and "1 x Silk scarf" in page
    assert f'href="{PAGE}?reference={waiting.reference}" id="return-link"' in page


# --- manage.py demo_return --------------------------------------------------------------------
@pytest.fixture
def demo(settings) -> None:
    settings.DEMO = settings.DEBUG = True


def demo_return(*args: str) -> str:
    out = StringIO()
    call_command("demo_return", *args, stdout=out)
    return out.getvalue()


def test_demo_return_says_the_goods_came_back_by_line_or_sku(waiting, demo, shirts):  # noqa: F811
    said = demo_return("2001", "--lines", f"{shirt_line(shirts)}x1,SKU-2x1")
    assert f"Return {waiting.reference} received: ticket {waiting.ticket_id}" in said
    waiting.refresh_from_db()
    assert waiting.arrived["orders"] == {
        "2001": {str(shirt_line(shirts)): 1, str(shirts.lines.get(sku="SKU-2").pk): 1}
    }
    assert waiting.arrived["by"] == "demo_return"
    with pytest.raises(CommandError, match="No return of order 2001 waits"):
        demo_return("2001")


def test_demo_return_flags_with_a_reason(waiting, demo):
    assert "flagged" in demo_return("2001", "--flag", "Wrong colour sent back")
    assert Decision.objects.get(ticket_id=waiting.ticket_id, answer="flagged").reason


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["1042"], "No return of order 1042 waits"),
        (["2001", "--lines", "SKU-1"], "is not a line and its units"),
        (["2001", "--lines", "SKU-1x9"], "3 were asked back"),
        (["2001", "--lines", "SKU-1x1", "--flag", "torn"], "not --lines"),
    ],
)
def test_demo_return_refuses_in_one_line_and_changes_nothing(waiting, demo, args, words):
    with pytest.raises(CommandError, match=words):
        demo_return(*args)
    nothing_changed(waiting)


def test_demo_return_refuses_to_run_in_production(settings, db):
    settings.DEMO = False
    with pytest.raises(CommandError, match="runs only in the demo"):
        demo_return("2001")


# --- in a browser -----------------------------------------------------------------------------
@pytest.mark.browser
@pytest.mark.parametrize("width", [390, 1280])
def test_the_returns_page_fits_a_phone_and_a_desk(
    browser,  # noqa: F811
    live_server,
    waiting,
    agent,
    width,
):
    from tests.test_browser import csp_problems
    from tests.test_browser_desk import page_for, shots

    page = page_for(browser, live_server, agent, width=width)
    page.goto(f"{live_server.url}{PAGE}")
    assert page.evaluate("document.activeElement.id") == "id_reference"  # a scanner types here
    page.keyboard.type(waiting.reference)
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Received").wait_for()
    page.screenshot(path=str(shots() / f"returns-{width}.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    for name in ("Received", "Flagged"):
        box = page.get_by_role("button", name=name).bounding_box()
        assert box and box["x"] + box["width"] <= width
    assert page.evaluate("document.activeElement.id") == "id_reference"  # the next parcel
    assert csp_problems(page, page.console_messages_seen) == []
    assert page.failed_requests == []
