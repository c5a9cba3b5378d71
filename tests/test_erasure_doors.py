"""The doors an erasure is asked through: an admin on a customer's page, the JSON API, Shopify's
signed customers/redact webhook and `manage.py erase_customer`; and the admins' erasures page.
Each asked rightly records one Erasure and sends its workflow on commit; each refused records
nothing and says why. The workflow itself is ops/erasure.py's, and not run here."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from api.models import ApiToken
from ops import shop_webhook
from ops.erasure import TAKE
from ops.models import Erasure
from refunds import enqueue
from refunds.models import Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review
from tests.test_browser_desk import browser  # noqa: F401 (fixture)

SECRET = "shpss_test_secret"
REDACT = "/webhooks/shop/customers-redact/"
SHOP_REDACT = "/webhooks/shop/shop-redact/"


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, int]]:
    """The tasks sent to the broker: none here, only recorded."""
    tasks: list[tuple[str, int]] = []
    monkeypatch.setattr(enqueue, "send", lambda task, pk, **kw: tasks.append((task, pk)) or True)
    return tasks


@pytest.fixture
def orders(db):
    """Ana's two orders, and Dev's."""
    return make_order("1042"), make_order("1044"), make_order("1045", name="Dev Patel")


def only_erasure() -> Erasure:
    assert Erasure.objects.count() == 1
    return Erasure.objects.get()


# --- the customer's page ----------------------------------------------------------------------
def erase(client: Client, confirm: str = "ana@example.com", **fields):
    data = {"email": "ana@example.com", "orders": ["1042"], "confirm": confirm, **fields}
    return client.post(reverse("ops:erasure_new"), data)


def test_an_admin_erases_a_customer_from_their_page(
    client, admin_user, orders, sent, django_capture_on_commit_callbacks
):
    client.force_login(admin_user)
    page = client.get(reverse("ops:customer", args=["ana@example.com"])).content.decode()
    assert "Erase this customer" in page and 'value="1044"' in page and 'value="1045"' not in page
    assert 'href="/ops/erasures/"' in page  # where the erasures asked for so far are
    with django_capture_on_commit_callbacks(execute=True):
        response = erase(client)
    assert response.status_code == 302 and response["Location"] == reverse("ops:erasures")
    erasure = only_erasure()
    assert (erasure.email, erasure.orders, erasure.requested_by) == (
        "ana@example.com",
        ["1042"],
        "admin admin",
    )
    assert sent == [(TAKE, erasure.pk)]
    listed = client.get(response["Location"]).content.decode()
    assert f"Erasure {erasure.pk} forgets ana@example.com" in listed  # the message
    assert f'id="erasure-{erasure.pk}"' in listed and erasure.pseudonym in listed


def test_a_confirmation_that_is_not_the_address_erases_nothing(client, admin_user, orders, sent):
    client.force_login(admin_user)
    for typed, words in [
        ("ana@example.org", "That is not ana@example.com: type the address exactly"),
        ("", "Type the customer&#x27;s email address to confirm."),
    ]:
        response = erase(client, confirm=typed)
        assert response.status_code == 400
        assert (
            words in response.content.decode() and 'id="erase-error"' in response.content.decode()
        )
    assert Erasure.objects.count() == 0 and sent == []


def test_an_order_of_another_customer_is_refused_on_the_page(client, admin_user, orders, sent):
    client.force_login(admin_user)
    response = erase(client, orders=["1042", "1045"])
    assert response.status_code == 400
    assert (
        "Order 1045 is not this customer&#x27;s: nothing was erased." in response.content.decode()
    )
    assert Erasure.objects.count() == 0


def test_a_refusal_of_the_service_shows_on_the_page(client, admin_user, db, sent):
    """An address no order holds, but not an address the service takes."""
    client.force_login(admin_user)
    response = client.post(
        reverse("ops:erasure_new"), {"email": "not@an@address", "confirm": "not@an@address"}
    )
    assert response.status_code == 400 and "valid email address" in response.content.decode()
    assert Erasure.objects.count() == 0


@pytest.mark.parametrize("persona", ["manager", "agent"])
def test_only_admins_see_the_form_erase_and_read_the_erasures(client, orders, persona, request):
    client.force_login(request.getfixturevalue(persona))
    page = client.get(reverse("ops:customer", args=["ana@example.com"]))
    if persona == "manager":
        assert page.status_code == 200 and "Erase this customer" not in page.content.decode()
    assert erase(client).status_code == 403
    assert client.get(reverse("ops:erasures")).status_code == 403
    assert Erasure.objects.count() == 0


def test_the_erasures_page_says_what_each_open_ticket_waits_on_and_what_was_erased(
    client, admin_user, orders, agent
):
    review = awaiting_review(orders[0], opened_by=agent)
    broken = awaiting_review(orders[1], opened_by=agent)
    Ticket.objects.filter(pk=broken.pk).update(status=Ticket.Status.FAILED)
    waiting = Erasure.objects.create(
        kind=Erasure.Kind.CUSTOMER,
        email="ana@example.com",
        thread_id="erasure-a",
        pseudonym="erased-aaaa",
        requested_by="admin admin",
        status=Erasure.Status.WAITING,
        waiting_for=[review.pk, broken.pk],
    )
    done = Erasure.objects.create(
        kind=Erasure.Kind.CUSTOMER,
        thread_id="erasure-b",
        pseudonym="erased-bbbb",
        requested_by="shop desk.myshopify.com",
        status=Erasure.Status.DONE,
        report={"memory": {"items": 2}, "records": {"api answers": 1, "processor events": 0}},
        last_error="stopped: a newer epoch",
    )
    client.force_login(admin_user)
    page = client.get(reverse("ops:erasures")).content.decode()
    assert page.index(f'id="erasure-{done.pk}"') < page.index(f'id="erasure-{waiting.pk}"')
    assert reverse("reviews:ticket", args=[review.pk]) in page
    assert "Awaiting review</span>: a reviewer decides it; a manager may reject it." in page
    assert "Failed</span>: an admin retries it (Failed)" in page
    assert '<td>memory</td><td>items</td><td class="num">2</td>' in page  # not the dict's items
    assert "api answers" in page and "stopped: a newer epoch" in page


# --- the JSON API -----------------------------------------------------------------------------
def api_as(user) -> Client:
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(user)[1]}"})


def post_json(api: Client, body, **headers):
    data = body if isinstance(body, str) else json.dumps(body)
    return api.post("/api/erasures/", data=data, content_type="application/json", headers=headers)


def test_an_admin_asks_for_an_erasure_by_the_api_and_reads_it(
    admin_user, orders, sent, django_capture_on_commit_callbacks
):
    api = api_as(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        response = post_json(api, {"email": "ana@example.com", "orders": ["1042", 1044]})
    assert response.status_code == 202, response.content
    answer = response.json()
    erasure = only_erasure()
    assert (erasure.email, erasure.orders, erasure.requested_by) == (
        "ana@example.com",
        ["1042", "1044"],
        "admin admin",
    )
    assert answer["id"] == erasure.pk and sent == [(TAKE, erasure.pk)]
    assert {k: answer[k] for k in ("status", "kind", "email", "waiting_for", "report")} == {
        "status": "running",
        "kind": "customer",
        "email": "ana@example.com",
        "waiting_for": [],
        "report": {},
    }
    Erasure.objects.filter(pk=erasure.pk).update(
        status=Erasure.Status.DONE, email="", report={"orders": {"orders": 2}}
    )
    read = api.get(f"/api/erasures/{erasure.pk}/").json()
    assert read["email"] is None and read["report"] == {"orders": {"orders": 2}}
    assert "ana@example.com" not in json.dumps(read)
    assert api.get("/api/erasures/99999/").status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"email": "ana at example.com"}, 400, "email: must be an address such as ana@example.com"),
        ({"orders": ["1042"]}, 400, "Missing field: email"),
        ('{"email": "ana@example.com",', 400, "JSON"),
        ({"email": "ana@example.com", "cc": "x"}, 400, "Unknown field(s): cc"),
        ({"email": "ana@example.com", "orders": ["9999"]}, 422, "No order 9999 is known"),
        ({"email": "ana@example.com", "orders": ["1045"]}, 422, "Order 1045 is not ana@"),
    ],
)
def test_a_bad_request_by_the_api_records_nothing_and_says_why(
    admin_user, orders, sent, body, status, words
):
    response = post_json(api_as(admin_user), body)
    assert response.status_code == status, response.content
    assert response.json()["status"] == status and words in response.json()["error"]
    assert Erasure.objects.count() == 0 and sent == []


@pytest.mark.parametrize("persona", ["manager", "agent"])
def test_only_admins_ask_for_or_read_erasures_by_the_api(orders, persona, request):
    api = api_as(request.getfixturevalue(persona))
    refused = post_json(api, {"email": "ana@example.com"})
    assert refused.status_code == 403 and "Only admins" in refused.json()["error"]
    assert Erasure.objects.count() == 0
    erasure = Erasure.objects.create(kind="customer", thread_id="e-1", pseudonym="p")
    assert api.get(f"/api/erasures/{erasure.pk}/").status_code == 403


def test_the_same_idempotency_key_answers_the_first_erasure_again(admin_user, orders, sent):
    api = api_as(admin_user)
    first = post_json(api, {"email": "ana@example.com"}, **{"Idempotency-Key": "k1"})
    again = post_json(api, {"email": "ana@example.com"}, **{"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 202 and first.json() == again.json()
    assert Erasure.objects.count() == 1


def test_the_schema_describes_both_erasure_endpoints(client, db):
    import yaml

    spec = yaml.safe_load(client.get("/api/schema/").content)
    post = spec["paths"]["/api/erasures/"]["post"]
    assert post["operationId"] == "erasures_request"
    assert {"202", "400", "403", "422"} <= set(post["responses"])
    read = spec["paths"]["/api/erasures/{erasure_id}/"]["get"]
    assert {"200", "403", "404"} <= set(read["responses"])
    body = spec["components"]["schemas"]["ErasureInRequest"]
    assert body["required"] == ["email"] and body["additionalProperties"] is False


# --- Shopify's customers/redact ---------------------------------------------------------------
REDACTED = {
    "shop_id": 954889,
    "shop_domain": "desk.myshopify.com",
    "customer": {"id": 191167, "email": "ana@example.com", "phone": "555-625-1199"},
    "orders_to_redact": [1042, "1044", 299938],  # the last one never reached the desk
}


def shop_post(client: Client, body, *, secret: str | None = SECRET, url: str = REDACT):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = (
        {} if secret is None else {"X-Shopify-Hmac-Sha256": shop_webhook.signature(secret, raw)}
    )
    return client.post(url, data=raw, content_type="application/json", headers=headers)


@pytest.fixture
def shop_secret(settings) -> None:
    settings.REFUNDS_SHOP_WEBHOOK_SECRET = SECRET


def test_the_shop_asks_to_forget_a_customer_and_orders_the_desk_lacks_are_left_out(
    client, orders, shop_secret, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = shop_post(client, REDACTED)
    assert response.status_code == 200, response.content
    erasure = only_erasure()
    assert (erasure.email, erasure.orders, erasure.requested_by) == (
        "ana@example.com",
        ["1042", "1044"],
        "shop desk.myshopify.com",
    )
    assert response.json() == {"erasure": erasure.pk, "status": "running"}
    assert sent == [(TAKE, erasure.pk)]
    assert shop_post(client, REDACTED).json()["erasure"] == erasure.pk  # Shopify's retry
    assert Erasure.objects.count() == 1


def test_an_unsigned_or_wrongly_signed_post_changes_nothing(client, orders, shop_secret, sent):
    missing = shop_post(client, REDACTED, secret=None)
    assert missing.status_code == 401 and "header is missing" in missing.json()["error"]
    wrong = shop_post(client, REDACTED, secret="another app's secret")
    assert wrong.status_code == 401 and "does not check out" in wrong.json()["error"]
    raw = json.dumps(REDACTED).encode()
    tampered = client.post(
        REDACT,
        data=raw.replace(b"ana@", b"ben@"),
        content_type="application/json",
        headers={"X-Shopify-Hmac-Sha256": shop_webhook.signature(SECRET, raw)},
    )
    assert tampered.status_code == 401
    garbage = client.post(
        REDACT, data=raw, content_type="application/json", headers={"X-Shopify-Hmac-Sha256": "=="}
    )
    assert garbage.status_code == 401
    assert Erasure.objects.count() == 0 and sent == []


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b'{"customer": {"email": "ana@example.com"', 400, "Not Shopify's customers/redact"),
        ({**REDACTED, "customer": {"id": 1}}, 400, "customer.email: Field required"),
        (
            {**REDACTED, "customer": {"email": "nobody"}},
            400,
            "customer.email: must be an address such as",
        ),
        ({**REDACTED, "customer": {"email": 7}}, 400, "customer.email: must be a string"),
        ({**REDACTED, "orders_to_redact": [True]}, 400, "orders_to_redact.0"),
        ({**REDACTED, "orders_to_redact": [1045]}, 422, "Order 1045 is not ana@example.com's"),
    ],
)
def test_a_signed_post_the_desk_cannot_take_says_why_and_changes_nothing(
    client, orders, shop_secret, sent, body, status, words
):
    response = shop_post(client, body)
    assert response.status_code == status, response.content
    assert words in response.json()["error"], response.json()
    assert Erasure.objects.count() == 0 and sent == []


def test_without_the_secret_the_shop_is_told_it_is_not_configured(client, orders, settings):
    settings.REFUNDS_SHOP_WEBHOOK_SECRET = ""
    for url in (REDACT, SHOP_REDACT):
        response = shop_post(client, REDACTED, url=url, secret="")
        assert response.status_code == 503
        assert "REFUNDS_SHOP_WEBHOOK_SECRET is not set" in response.json()["error"]
    assert Erasure.objects.count() == 0


def test_shop_redact_is_taken_signed_and_erases_nothing(client, orders, shop_secret, caplog):
    body = {"shop_id": 954889, "shop_domain": "desk.myshopify.com"}
    assert shop_post(client, body, url=SHOP_REDACT, secret=None).status_code == 401
    response = shop_post(client, body, url=SHOP_REDACT)
    assert response.status_code == 200 and response.json() == {"received": True, "erased": False}
    assert "desk.myshopify.com asked to erase the shop's data" in caplog.text
    assert Erasure.objects.count() == 0


# --- the operator's command -------------------------------------------------------------------
def test_an_operator_erases_a_customer_and_is_told_where_to_watch(orders, sent, capsys):
    call_command("erase_customer", "ana@example.com", "--order", "1042", "--order", "1044")
    erasure = only_erasure()
    assert (erasure.orders, erasure.requested_by) == (["1042", "1044"], "operator (manage.py)")
    out = capsys.readouterr().out
    assert f"Erasure {erasure.pk} (running) forgets ana@example.com" in out
    assert "/ops/erasures/" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["ana@example.com", "--order", "1045"], "Order 1045 is not ana@example.com's"),
        (["ana.example.com"], "must be an address such as"),
    ],
)
def test_the_command_refuses_in_words_and_erases_nothing(orders, sent, args, words):
    with pytest.raises(CommandError, match=words):
        call_command("erase_customer", *args)
    assert Erasure.objects.count() == 0


# --- Django admin -----------------------------------------------------------------------------
def test_the_django_admin_lists_erasures_and_changes_none(client, admin_user, db):
    erasure = Erasure.objects.create(kind="customer", thread_id="e-1", pseudonym="erased-1")
    client.force_login(admin_user)
    assert "erased-1" in client.get(reverse("admin:ops_erasure_changelist")).content.decode()
    change = reverse("admin:ops_erasure_change", args=[erasure.pk])
    assert client.get(change).status_code == 200
    assert client.post(change, {"pseudonym": "edited"}).status_code == 403
    assert client.get(reverse("admin:ops_erasure_add")).status_code == 403
    assert client.get(reverse("admin:ops_erasure_delete", args=[erasure.pk])).status_code == 403
    erasure.refresh_from_db()
    assert erasure.pseudonym == "erased-1"


# --- in a browser -----------------------------------------------------------------------------
@pytest.mark.browser
@pytest.mark.parametrize("width", [390, 1280])
def test_the_erasures_page_fits_a_phone_and_a_desk(
    browser,  # noqa: F811
    live_server,
    admin_user,
    agent,
    width,
):
    from tests.test_browser import csp_problems
    from tests.test_browser_desk import page_for, shots

    review = awaiting_review(make_order("1042"), opened_by=agent)
    Erasure.objects.create(
        kind=Erasure.Kind.CUSTOMER,
        email="ana@example.com",
        orders=["1042"],
        thread_id="erasure-a",
        pseudonym="erased-5f1c09a2b4",
        requested_by="shop desk.myshopify.com",
        status=Erasure.Status.WAITING,
        waiting_for=[review.pk],
    )
    Erasure.objects.create(
        kind=Erasure.Kind.CUSTOMER,
        thread_id="erasure-b",
        pseudonym="erased-0be2d4c7e1",
        requested_by="admin admin",
        status=Erasure.Status.DONE,
        finished_at=timezone.now(),
        report={  # as a run writes it: every store, counted
            "checkpoints": {"threads": 2},
            "memory": {"items": 1},
            "records": {"api answers": 1, "processor events": 0},
            "files": {"files": 2},
            "outbox": {"emails": 3, "webhook answers": 1},
            "messages": {"messages": 2},
            "tickets": {"tickets": 1},
            "orders": {"orders": 1},
        },
    )
    page = page_for(browser, live_server, admin_user, width=width)
    page.goto(f"{live_server.url}/ops/erasures/")
    page.screenshot(path=str(shots() / f"erasures-{width}.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    report = page.locator("table.report").first.bounding_box()
    assert report and report["x"] + report["width"] <= width
    assert page.get_by_role("link", name=f"Ticket {review.pk}").is_visible()
    assert csp_problems(page, page.console_messages_seen) == []
