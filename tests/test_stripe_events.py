"""Stripe's events in (refunds/payments/stripe_webhook.py, refunds/services/stripe_events.py):
signed as Stripe signs them, stored once by id, handled by a worker that re-reads the refund
from localstripe (the `localstripe` fixture) and records what it holds now.

localstripe's refunds are `succeeded` at once: it has no `pending`, no failure and no
`failure_reason`. Where a test needs Stripe to say those, `StripeSays` wraps the stripe library's
own RefundService (its `retrieve` and `list`, the seam the gateway's client calls) and changes
what localstripe answered, clearly on the test's side; our code is not patched."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from datetime import timedelta
from typing import Any

import hypothesis
import pytest
import stripe
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from core.clock import day_words
from devtools.localstripe import SECRET_KEY
from devtools.smtp_sink import free_port
from insights.metrics import DeskCollector
from refunds import enqueue, money, services, tasks
from refunds import lease as leases
from refunds.models import Charge, OutsideRefund, StripeEvent, Ticket
from refunds.payments.stripe import StripeGateway
from refunds.services.stripe_events import HANDLE
from tests.conftest import make_order

WEBHOOK_SECRET = "whsec_test_refund_desk_0000000000"
URL = "/payments/stripe/webhook/"


# --- how Stripe signs and sends --------------------------------------------------------------
def signature(payload: str, *, secret: str = WEBHOOK_SECRET, at: int | None = None) -> str:
    """The `Stripe-Signature` header as Stripe computes it (and stripe.WebhookSignature checks
    it): the time, and an HMAC-SHA256 of "time.payload" under the endpoint's secret."""
    at = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{at}.{payload}".encode(), hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


_events = iter(range(1, 10**6))


def event(kind: str, obj: dict[str, Any], *, event_id: str = "", created: int = 0) -> dict:
    return {
        "id": event_id or f"evt_test_{next(_events)}",
        "object": "event",
        "type": kind,
        "created": created or int(time.time()),
        "livemode": False,
        "data": {"object": obj},
    }


def post(client, body: dict | str, *, header: str | None = "sign", **sign) -> Any:
    payload = body if isinstance(body, str) else json.dumps(body)
    headers = {}
    if header == "sign":
        headers["HTTP_STRIPE_SIGNATURE"] = signature(payload, **sign)
    elif header is not None:
        headers["HTTP_STRIPE_SIGNATURE"] = header
    return client.post(URL, payload, content_type="application/json", **headers)


class StripeSays:
    """Test side: what "Stripe" answers for some refunds where localstripe cannot say it (a
    refund `pending`, or `failed` with a reason), laid over localstripe's own answer at the
    stripe library's RefundService. `says[refund_id] = {"status": "pending"}`; delete the entry
    and localstripe's answer (`succeeded`) comes through untouched. `creating = {"status":
    "pending"}` answers each refund created from then on so (as Stripe answers most card
    refunds' create call) and keeps saying it of that refund until the test changes `says`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.says: dict[str, dict[str, Any]] = {}
        self.creating: dict[str, Any] = {}
        create = stripe.RefundService.create
        retrieve, listing = stripe.RefundService.retrieve, stripe.RefundService.list

        def create_as_said(service, *args, **kwargs):
            refund = create(service, *args, **kwargs)
            if self.creating:
                self.says[refund.id] = dict(self.creating)
            return self._over(refund)

        def retrieve_as_said(service, refund, *args, **kwargs):
            return self._over(retrieve(service, refund, *args, **kwargs))

        def list_as_said(service, *args, **kwargs):
            listed = listing(service, *args, **kwargs)
            for refund in listed.data:
                self._over(refund)
            return listed

        monkeypatch.setattr(stripe.RefundService, "create", create_as_said)
        monkeypatch.setattr(stripe.RefundService, "retrieve", retrieve_as_said)
        monkeypatch.setattr(stripe.RefundService, "list", list_as_said)

    def _over(self, refund):
        for field, value in self.says.get(refund.id, {}).items():
            refund[field] = value
        return refund


# --- fixtures ----------------------------------------------------------------------------------
@pytest.fixture
def stripe_desk(settings, localstripe):
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.STRIPE_SECRET_KEY = SECRET_KEY
    settings.STRIPE_API_BASE = localstripe.url
    settings.STRIPE_TIMEOUT = 2.0
    return localstripe


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, int]]:
    """What was handed to workers (task name, row id), in place of the broker."""
    handed: list[tuple[str, int]] = []
    monkeypatch.setattr(enqueue, "send", lambda task, pk: handed.append((task, pk)) or True)
    return handed


@pytest.fixture
def deliver(client, sent, django_capture_on_commit_callbacks):
    """Stripe delivers an event: the post, then the worker the post woke (as Celery runs it)."""

    def deliver_it(body: dict) -> Any:
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            response = post(client, body)
        assert response.status_code == 200, response.content
        for task, pk in sent:
            assert task == HANDLE
            tasks.handle_stripe_event(pk)
        return response

    return deliver_it


@pytest.fixture
def stripe_says(monkeypatch) -> StripeSays:
    return StripeSays(monkeypatch)


_orders = iter(range(3000, 4000))


def paid_ticket(
    localstripe, says: StripeSays | None = None, *, answered: str = "pending"
) -> tuple[Ticket, Charge, dict]:
    """A refunded ticket whose refund the ledger made at localstripe: (ticket, charge, refund).
    With `says`, Stripe answers the create call with `answered` ("pending" by default, as it
    answers most card refunds) and goes on saying it; without, localstripe's `succeeded`."""
    if says is not None:
        says.creating = {"status": answered}
    number = str(next(_orders))
    order = make_order(number)
    order.payment_reference = localstripe.payment_intent(5699)
    order.save()
    ticket = Ticket.objects.create(thread_id=f"refund-{number}", order=order)
    lease = leases.grant(ticket)
    assert lease is not None
    money.pay(
        gateway=StripeGateway(),
        ticket_id=ticket.pk,
        order_id=order.pk,
        lease=lease,
        key=f"refund-{number}:charge_order:{number}:699",
        amount_cents=699,
    )
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.REFUNDED)
    ticket.refresh_from_db()
    charge = Charge.objects.get(ticket=ticket)
    [refund] = localstripe.refunds(order.payment_reference)
    assert refund["id"] == charge.receipt
    if says is not None:
        says.creating = {}
        assert charge.processor_status == answered  # what the create call answered
    return ticket, charge, refund


# --- the door: signed, stored once, handled later ---------------------------------------------
def test_a_signed_event_is_stored_and_handed_to_a_worker_not_handled_in_the_request(
    db, client, stripe_desk, sent, django_capture_on_commit_callbacks, stripe_says
):
    _, charge, refund = paid_ticket(stripe_desk, stripe_says)
    del stripe_says.says[refund["id"]]  # Stripe holds succeeded now; the event says so too
    body = event("refund.updated", refund)

    with django_capture_on_commit_callbacks(execute=True):
        response = post(client, body)

    assert response.status_code == 200
    row = StripeEvent.objects.get()
    assert (row.event_id, row.type, row.payload) == (body["id"], "refund.updated", body)
    assert row.handled_at is None
    assert sent == [(HANDLE, row.pk)]
    charge.refresh_from_db()
    assert charge.processor_status == "pending"  # nothing recorded until a worker re-reads


def test_a_resent_event_is_stored_once_and_changes_nothing(
    db, client, stripe_desk, sent, django_capture_on_commit_callbacks
):
    _, _, refund = paid_ticket(stripe_desk)
    body = event("refund.created", refund)
    with django_capture_on_commit_callbacks(execute=True):
        first = post(client, body)
    handed = list(sent)
    for pk in [pk for _, pk in handed]:
        tasks.handle_stripe_event(pk)
    handled = StripeEvent.objects.get()

    with django_capture_on_commit_callbacks(execute=True):
        again = post(client, body)

    assert (first.status_code, again.status_code) == (200, 200)
    assert (first.json()["stored"], again.json()["stored"]) == (True, False)
    assert sent == handed  # the resent one woke no worker
    assert list(StripeEvent.objects.values()) == [
        {f.attname: getattr(handled, f.attname) for f in StripeEvent._meta.concrete_fields}
    ]


@pytest.mark.parametrize(
    "how",
    ["missing", "another secret", "expired", "body changed", "not a header"],
)
def test_a_bad_missing_or_expired_signature_is_400_and_stores_nothing(
    db, client, stripe_desk, sent, django_capture_on_commit_callbacks, how
):
    body = json.dumps(event("refund.updated", {"id": "re_123", "object": "refund"}))
    header: str | None = {
        "missing": None,
        "another secret": signature(body, secret="whsec_someone_else"),
        "expired": signature(body, at=int(time.time()) - 301),
        "body changed": signature(body.replace("re_123", "re_456")),
        "not a header": "v1=abc",
    }[how]

    with django_capture_on_commit_callbacks(execute=True):
        response = post(client, body, header=header)

    assert response.status_code == 400
    assert response.json()["code"] == "bad_request"
    assert StripeEvent.objects.count() == 0
    assert sent == []


def test_the_signatures_tolerance_is_the_setting(db, client, stripe_desk, settings):
    settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS = 600
    body = event("refund.updated", {"id": "re_123", "object": "refund"})

    assert post(client, body, at=int(time.time()) - 500).status_code == 200


def test_without_a_webhook_secret_every_event_is_refused_and_says_why(
    db, client, stripe_desk, settings
):
    settings.STRIPE_WEBHOOK_SECRET = ""
    body = json.dumps(event("refund.updated", {"id": "re_123", "object": "refund"}))

    unsigned = post(client, body, header=None)
    signed_with_nothing = post(client, body, secret="")

    for response in (unsigned, signed_with_nothing):
        assert response.status_code == 503
        assert "STRIPE_WEBHOOK_SECRET is not set" in response.json()["error"]
    assert StripeEvent.objects.count() == 0


def test_a_body_over_the_limit_is_413_and_stores_nothing(db, client, stripe_desk, settings):
    settings.STRIPE_WEBHOOK_MAX_BODY_BYTES = 16 * 1024
    body = event("refund.updated", {"id": "re_123", "object": "refund", "pad": "x" * 17_000})

    assert post(client, body).status_code == 413
    assert StripeEvent.objects.count() == 0


def raw_event(**fields: str) -> str:
    """An event's JSON with some fields written as they stand (JSON has no Infinity)."""
    written = {"id": '"evt_raw"', "type": '"refund.updated"', "created": "1700000000"}
    written |= {"data": '{"object": {"id": "re_1"}}'} | fields
    return "{" + ", ".join(f'"{name}": {value}' for name, value in written.items()) + "}"


NOT_EVENTS = {
    "not JSON": ("not json", "the body: Invalid JSON"),
    "a list": ("[1, 2]", "the body: Input should be an object"),
    "no data": ({"id": "evt_1", "type": "refund.updated", "created": 1}, "data: Field required"),
    "an object that is text": (event("refund.updated", "re_1"), "data.object: Input should be"),
    "an object's id a number": (event("refund.updated", {"id": 5}), "data.object.id: Input"),
    "created as text": (raw_event(created='"soon"'), "created: Input should be a valid integer"),
    "created past year 9999": (raw_event(created=str(10**20)), "created: Input should be less"),
    "created Infinity": (raw_event(created="Infinity"), "created: Input should be a valid"),
    "an id of 300 characters": (raw_event(id=f'"evt_{"x" * 296}"'), "id: String should have at"),
    "a NUL": (raw_event(data='{"object": {"id": "re_1", "note": "a\\u0000b"}}'), "a NUL"),
    "NaN": (raw_event(data='{"object": {"id": "re_1", "amount": NaN}}'), "not JSON compliant"),
    "nested 10,000 deep": (
        raw_event(data='{"object": {"id": "re_1"}, "x": ' + "[" * 10_000 + "]" * 10_000 + "}"),
        "recursion limit",
    ),
}


@pytest.mark.parametrize("shape", list(NOT_EVENTS))
def test_a_signed_post_that_is_not_an_event_is_400_in_words_and_stores_nothing(
    db, client, stripe_desk, sent, django_capture_on_commit_callbacks, shape
):
    body, words = NOT_EVENTS[shape]

    with django_capture_on_commit_callbacks(execute=True):
        response = post(client, body)

    assert response.status_code == 400
    assert response.json()["error"].startswith("Not one of Stripe's events: ")
    assert words in response.json()["error"]
    assert StripeEvent.objects.count() == 0
    assert sent == []


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@hypothesis.settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    field=st.sampled_from(["id", "type", "created", "data", "data.object", "data.object.id"]),
    value=JSON,
)
def test_a_signed_event_with_any_field_of_any_json_answers_200_or_a_clear_400(
    db, client, stripe_desk, field, value
):
    body = event("refund.updated", {"id": "re_1"})
    *path, last = field.split(".")
    parent = body
    for name in path:
        parent = parent[name]
    parent[last] = value
    stored = StripeEvent.objects.count()

    response = post(client, json.dumps(body))

    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert response.json()["error"].startswith("Not one of Stripe's events: ")
        assert StripeEvent.objects.count() == stored


def test_it_rejects_get(db, client, stripe_desk):
    assert client.get(URL).status_code == 405


# --- the handler: re-read, so late and out-of-order events converge ---------------------------
def test_events_twice_and_out_of_order_converge_on_what_stripe_holds_now(
    db, stripe_desk, deliver, stripe_says
):
    _, charge, refund = paid_ticket(stripe_desk, stripe_says)
    start = int(time.time()) - 60
    created = event("refund.created", refund | {"status": "pending"}, created=start)
    updated = event("refund.updated", refund | {"status": "succeeded"}, created=start + 30)
    stripe_says.says[refund["id"]] = {"status": "pending"}  # Stripe: still on its way

    deliver(updated)  # the later event first: its payload says succeeded; Stripe does not yet
    charge.refresh_from_db()
    assert charge.processor_status == Charge.ProcessorStatus.PENDING

    del stripe_says.says[refund["id"]]  # now localstripe's own answer: succeeded
    deliver(created)  # the older event, its payload "pending", arrives last
    deliver(created)  # and again
    deliver(event("charge.refund.updated", refund | {"status": "pending"}))

    charge.refresh_from_db()
    assert (
        charge.processor_status
        == "succeeded"
        == stripe_desk.refunds(charge.order.payment_reference)[0]["status"]
    )
    assert StripeEvent.objects.count() == 3
    assert not StripeEvent.objects.filter(handled_at__isnull=True).exists()


def test_an_older_read_landing_after_a_newer_one_changes_nothing(db, stripe_desk):
    """Two workers at once on two events of one refund: the one that read "pending" writes
    after the one that read "succeeded". What is recorded only moves forward."""
    _, charge, refund = paid_ticket(stripe_desk)

    services.stripe_events.refund_record(refund | {"status": "succeeded"})
    said = services.stripe_events.refund_record(refund | {"status": "pending"})

    charge.refresh_from_db()
    assert charge.processor_status == "succeeded"
    assert "kept" in said


def test_a_refund_stripe_fails_after_it_succeeded_is_recorded_failed_with_the_reason(
    db, stripe_desk, deliver, stripe_says
):
    _, charge, refund = paid_ticket(stripe_desk)
    deliver(event("refund.updated", refund))
    stripe_says.says[refund["id"]] = {
        "status": "failed",
        "failure_reason": "expired_or_canceled_card",
    }

    deliver(event("refund.failed", refund))

    charge.refresh_from_db()
    assert (charge.processor_status, charge.failure_reason) == (
        "failed",
        "expired_or_canceled_card",
    )
    assert charge.status == Charge.Status.SUCCEEDED  # the ledger's path is not this slice's


def test_charge_refunded_re_reads_every_refund_of_the_charge(db, stripe_desk, deliver, stripe_says):
    _, charge, refund = paid_ticket(stripe_desk, stripe_says, answered="requires_action")
    stripe_says.says[refund["id"]] = {"status": "pending"}

    deliver(event("charge.refunded", {"id": refund["charge"], "object": "charge"}))

    charge.refresh_from_db()
    assert charge.processor_status == "pending"
    assert StripeEvent.objects.get().outcome == f"{refund['id']}: pending"


def test_a_refund_is_matched_by_the_receipt_we_stored_when_it_carries_no_key(
    db, stripe_desk, deliver
):
    _, charge, refund = paid_ticket(stripe_desk)

    deliver(event("refund.updated", refund | {"metadata": {}}))  # the payload is not read
    services.stripe_events.refund_record(refund | {"metadata": {}, "status": "failed"})

    charge.refresh_from_db()
    assert charge.processor_status == "failed"


def refund_with_our_key(localstripe, payment: str, key: str, amount: int = 100) -> dict:
    """A refund made at Stripe carrying `key` as the desk's (another desk on the same account,
    one made in the dashboard with our metadata copied): not the ledger row's own refund."""
    return localstripe.call(
        "POST",
        "/v1/refunds",
        payment_intent=payment,
        amount=str(amount),
        **{f"metadata[{StripeGateway.METADATA_KEY}]": key},
    )


@pytest.mark.parametrize("where", ["another payment", "the order's payment"])
def test_a_failed_refund_carrying_our_key_that_is_not_the_rows_changes_nothing_on_the_row(
    db, stripe_desk, deliver, where
):
    ticket, charge, _ = paid_ticket(stripe_desk)
    order = ticket.order
    payment = stripe_desk.payment_intent(900) if where == "another payment" else None
    other = refund_with_our_key(
        stripe_desk, payment or order.payment_reference, charge.idempotency_key
    )
    before = list(Charge.objects.values())

    for body in stripe_desk.fail_refund(other["id"]):  # refund.failed, charge.refund.updated
        deliver(body)

    assert list(Charge.objects.values()) == before  # not failed, its ticket not handed back
    assert money.refundable_cents(order) == 0  # the order was refunded: no second approval
    outcomes = list(StripeEvent.objects.order_by("pk").values_list("outcome", flat=True))
    if payment:
        assert (
            outcomes
            == [f"{other['id']}: not the desk's, and no order has its payment: nothing recorded"]
            * 2
        )
        assert not OutsideRefund.objects.exists()
    else:
        assert outcomes == [
            f"{other['id']}: made outside the desk, recorded against order {order.number}",
            f"{other['id']}: made outside the desk, already recorded against order {order.number}",
        ]
        assert OutsideRefund.objects.get().status == "failed"


def test_a_row_without_its_receipt_yet_is_found_by_its_key_on_its_orders_payment_only(
    db, stripe_desk, deliver
):
    """The create call's answer was lost (the row under way, no receipt yet): an event finds the
    row by the key its refund carries, if that refund gives back the order's payment."""
    _, charge, refund = paid_ticket(stripe_desk)
    Charge.objects.filter(pk=charge.pk).update(status="pending", receipt=None, processor_status="")
    elsewhere = stripe_desk.payment_intent(900)

    deliver(
        event("refund.updated", refund_with_our_key(stripe_desk, elsewhere, charge.idempotency_key))
    )
    charge.refresh_from_db()
    assert charge.processor_status == ""

    deliver(event("refund.updated", refund))
    charge.refresh_from_db()
    assert charge.processor_status == "succeeded"


def test_a_refund_made_outside_the_desk_is_recorded_once_against_its_order_and_shown(
    db, stripe_desk, deliver, client, django_user_model
):
    ticket, charge, _ = paid_ticket(stripe_desk)
    outside = stripe_desk.call(
        "POST",
        "/v1/refunds",
        payment_intent=ticket.order.payment_reference,
        amount="1200",
    )
    before = list(Charge.objects.values())

    deliver(event("refund.created", outside))
    deliver(event("refund.updated", outside))  # another event of it: the same row, once

    rows = list(OutsideRefund.objects.values("order_id", "processor_id", "amount_cents", "status"))
    assert rows == [
        {
            "order_id": ticket.order_id,
            "processor_id": outside["id"],
            "amount_cents": 1200,
            "status": "succeeded",
        }
    ]
    outcomes = list(StripeEvent.objects.order_by("pk").values_list("outcome", flat=True))
    number = ticket.order.number
    assert outcomes == [
        f"{outside['id']}: made outside the desk, recorded against order {number}",
        f"{outside['id']}: made outside the desk, already recorded against order {number}",
    ]
    assert list(Charge.objects.values()) == before  # the desk's own refund is left as it was
    manager = django_user_model.objects.create_user("mara", password="x")
    manager.groups.add(Group.objects.get_or_create(name="Managers")[0])
    client.force_login(manager)
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    made = timezone.localdate(OutsideRefund.objects.get().made_at)
    assert f"$12.00 refunded outside the desk on {day_words(made)}." in page


def test_a_refund_of_a_payment_no_order_has_is_stored_and_nothing_else_changes(
    db, stripe_desk, deliver, caplog
):
    paid_ticket(stripe_desk)
    stranger = stripe_desk.payment_intent(900)  # a payment of no order the desk has
    outside = stripe_desk.call("POST", "/v1/refunds", payment_intent=stranger, amount="100")
    before = list(Charge.objects.values())

    with caplog.at_level(logging.INFO, logger="refunds.services.stripe_events"):
        deliver(event("refund.created", outside))

    row = StripeEvent.objects.get()
    assert row.handled_at is not None
    assert row.outcome == (
        f"{outside['id']}: not the desk's, and no order has its payment: nothing recorded"
    )
    assert list(Charge.objects.values()) == before
    assert not OutsideRefund.objects.exists()
    assert f"refund {outside['id']} is not the desk's and no order has its payment" in caplog.text


def test_an_event_whose_read_fails_is_left_for_the_sweep(
    db, stripe_desk, deliver, settings, stripe_says
):
    _, charge, refund = paid_ticket(stripe_desk, stripe_says)
    settings.STRIPE_API_BASE = f"http://127.0.0.1:{free_port()}"  # Stripe unreachable

    deliver(event("refund.updated", refund))

    row = StripeEvent.objects.get()
    assert row.handled_at is None
    assert "Stripe unreachable" in row.handle_error
    charge.refresh_from_db()
    assert charge.processor_status == "pending"


def test_a_stored_event_never_handled_is_handled_by_the_recovery_sweep(
    db, client, stripe_desk, sent, django_capture_on_commit_callbacks, settings, stripe_says
):
    """A worker killed mid-handle: the event is stored, its attempt counted, never handled."""
    _, charge, refund = paid_ticket(stripe_desk, stripe_says)
    del stripe_says.says[refund["id"]]  # Stripe: succeeded since
    with django_capture_on_commit_callbacks(execute=True):
        post(client, event("refund.updated", refund))
    row = StripeEvent.objects.get()
    long_ago = timezone.now() - timedelta(seconds=settings.REFUNDS_SWEEP_GRACE_SECONDS + 1)
    StripeEvent.objects.filter(pk=row.pk).update(received_at=long_ago, attempts=1)
    sent.clear()

    tasks.recover_tickets()  # beat's one recovery sweep
    tasks.recover_tickets()  # its wake-up is in the queue: not sent again

    assert sent == [(HANDLE, row.pk)]
    tasks.handle_stripe_event(row.pk)
    row.refresh_from_db()
    charge.refresh_from_db()
    assert row.handled_at is not None
    assert charge.processor_status == "succeeded"
    sent.clear()
    tasks.recover_tickets()
    assert sent == []


def test_the_sweep_gives_up_on_an_event_after_the_attempts(db, stripe_desk, sent, settings):
    _, _, refund = paid_ticket(stripe_desk)
    row, _ = services.stripe_event_receive(event=event("refund.updated", refund))
    long_ago = timezone.now() - timedelta(seconds=settings.REFUNDS_SWEEP_GRACE_SECONDS + 1)
    StripeEvent.objects.filter(pk=row.pk).update(
        received_at=long_ago, attempts=settings.REFUNDS_MAX_ATTEMPTS
    )

    assert services.stripe_events_recover() == []


# --- what the desk shows ---------------------------------------------------------------------
ON_ITS_WAY = "Refund of $6.99 started, on its way to the customer&#x27;s bank"


def pill(client, ticket: Ticket) -> str:
    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    start = html.index('id="ticket-status-pill">') + len('id="ticket-status-pill">')
    return html[start : html.index("</span>", start)]


def test_the_ticket_says_the_refund_is_on_its_way_while_stripe_says_pending(
    db, client, manager, stripe_desk, deliver, stripe_says
):
    ticket, _, refund = paid_ticket(stripe_desk, stripe_says, answered="requires_action")
    client.force_login(manager)
    assert pill(client, ticket) == ON_ITS_WAY  # what the create call answered

    stripe_says.says[refund["id"]] = {"status": "pending"}
    deliver(event("refund.created", refund))
    assert pill(client, ticket) == ON_ITS_WAY


def test_the_ticket_says_refunded_only_once_stripe_says_succeeded(
    db, client, manager, stripe_desk, deliver, stripe_says
):
    ticket, _, refund = paid_ticket(stripe_desk, stripe_says)
    deliver(event("refund.created", refund))
    del stripe_says.says[refund["id"]]
    client.force_login(manager)
    assert pill(client, ticket) == ON_ITS_WAY

    deliver(event("refund.updated", refund))
    assert pill(client, ticket) == "Refunded"
    # A late "pending" (an old event, re-read while Stripe briefly said so) moves nothing back.
    stripe_says.says[refund["id"]] = {"status": "pending"}
    deliver(event("refund.created", refund))
    assert pill(client, ticket) == "Refunded"


def test_a_refund_stripe_answered_succeeded_reads_refunded_from_the_start(
    db, client, manager, stripe_desk
):
    ticket, charge, _ = paid_ticket(stripe_desk)  # localstripe answers succeeded at once
    client.force_login(manager)

    assert charge.processor_status == "succeeded"
    assert pill(client, ticket) == "Refunded"


def test_a_refund_its_gateway_never_reported_reads_refunded_as_before(
    db, client, manager, stripe_desk
):
    """A gateway that says nothing of its refunds' later life (an HTTP processor without a
    status, a ledger row from before the desk recorded Stripe's): the desk says "Refunded"."""
    ticket, charge, _ = paid_ticket(stripe_desk)
    Charge.objects.filter(pk=charge.pk).update(processor_status="")
    client.force_login(manager)

    assert pill(client, ticket) == "Refunded"


def test_the_ticket_says_a_refund_failed_at_the_processor_with_the_reason(
    db, client, manager, stripe_desk, deliver, stripe_says
):
    ticket, _, refund = paid_ticket(stripe_desk)
    stripe_says.says[refund["id"]] = {"status": "failed", "failure_reason": "lost_or_stolen_card"}
    deliver(event("refund.failed", refund))
    client.force_login(manager)

    assert pill(client, ticket) == (
        "Refund of $6.99 failed. The customer&#x27;s bank refused the refund: the card was "
        "reported lost or stolen. No money reached them."
    )


def test_the_dashboard_and_metrics_count_refunds_on_their_way_and_failed(
    db, client, manager, stripe_desk
):
    _, pending, _ = paid_ticket(stripe_desk)
    _, failed, _ = paid_ticket(stripe_desk)
    _, done, _ = paid_ticket(stripe_desk)
    Charge.objects.filter(pk=pending.pk).update(processor_status="pending")
    Charge.objects.filter(pk=failed.pk).update(processor_status="failed")
    Charge.objects.filter(pk=done.pk).update(processor_status="succeeded")
    client.force_login(manager)

    html = client.get(reverse("insights:dashboard")).content.decode()
    gauges = {m.name: m.samples[0].value for m in DeskCollector().collect() if m.samples}

    assert '<span class="kpi">1</span> refund on its way to the bank' in html
    assert '<span class="kpi">1</span> refund failed at the processor' in html
    assert gauges["refund_desk_refunds_pending"] == 1
    assert gauges["refund_desk_refunds_failed"] == 1
    assert gauges["refund_desk_stripe_events_unhandled"] == 0
