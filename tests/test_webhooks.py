"""Webhooks for helpdesks: every ticket status change, written by a trigger in the same
transaction, fanned out to the registered endpoints, POSTed signed (HMAC-SHA256 over the
timestamp and the body) to a real HTTP receiver on a loopback port, retried with backoff, with a
delivery log and "send again"; the event id lets the receiver drop a duplicate."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection
from django.utils import timezone

from devtools.smtp_sink import free_port
from refunds import lease, runner, services
from refunds.models import Ticket
from webhooks import delivery, signing
from webhooks.models import Attempt, Delivery, Endpoint, Event


class Receiver:
    """A helpdesk's endpoint, as an integrator would write it: check the signature, drop an
    event id seen before, answer 2xx. `fail_next` makes it answer 500 a number of times."""

    def __init__(self, secret: str = "") -> None:
        self.secret = secret
        self.port = free_port()
        self.received: list[dict] = []  # every POST, verified or not
        self.accepted: list[dict] = []  # events taken in (first time seen)
        self.duplicates: list[str] = []
        self.bad_signatures = 0
        self.fail_next = 0
        self.redirect_to = ""  # answer 307 to this URL instead of taking the event
        self.delay = 0.0  # seconds to wait before answering
        self.received_at: list[float] = []  # time.monotonic() of each POST's arrival
        self.on_post: Callable[[], None] | None = None  # runs once, at the first POST
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.on_post is not None:
                    receiver.on_post()
                    receiver.on_post = None
                status = receiver.take(raw, dict(self.headers))
                time.sleep(receiver.delay)
                self.send_response(status)
                if status == 307:
                    self.send_header("Location", receiver.redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/refund-desk"

    def take(self, raw: bytes, headers: dict[str, str]) -> int:
        with self.lock:
            self.received.append({"headers": headers, "raw": raw})
            self.received_at.append(time.monotonic())
            if self.redirect_to:
                return 307
            if self.fail_next:
                self.fail_next -= 1
                return 500
            try:
                signing.verify(self.secret, raw, headers.get(signing.HEADER, ""))
            except signing.BadSignature:
                self.bad_signatures += 1
                return 400
            event = json.loads(raw)
            if event["id"] != headers.get(signing.EVENT_ID_HEADER):
                return 400
            if any(e["id"] == event["id"] for e in self.accepted):
                self.duplicates.append(event["id"])  # seen before: acknowledged, not applied
                return 200
            self.accepted.append(event)
            return 200

    def start(self) -> Receiver:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _receivers_on_this_machine(settings) -> None:
    """The receivers here listen on 127.0.0.1 over plain http: allowed only when asked for
    (tests/test_webhook_addresses.py checks the refusals)."""
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_ALLOW_PRIVATE = True


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


@pytest.fixture
def endpoint(db, receiver) -> Endpoint:
    made = Endpoint.objects.create(url=receiver.url, description="helpdesk")
    receiver.secret = made.secret
    return made


def statuses(receiver: Receiver) -> list[tuple[str | None, str]]:
    return [
        (e["data"]["ticket"]["previous_status"], e["data"]["ticket"]["status"])
        for e in receiver.accepted
    ]


# --- events come from the database, with the change ----------------------------------------------
def test_opening_a_ticket_and_each_status_change_make_one_event(db, late_order):
    ticket = Ticket.objects.create(thread_id="t-1", order=late_order)
    Ticket.objects.filter(pk=ticket.pk).update(status="running")
    Ticket.objects.filter(pk=ticket.pk).update(status="running", attempts=3)  # no change
    Ticket.objects.filter(pk=ticket.pk).update(note="edited")  # not a status
    Ticket.objects.filter(pk=ticket.pk).update(status="awaiting_review", amount_cents=699)
    changes = list(Event.objects.values_list("from_status", "to_status", "amount_cents"))
    assert changes == [
        ("", "new", None),
        ("new", "running", None),
        ("running", "awaiting_review", 699),
    ]


def test_the_raw_sql_of_the_lease_grant_makes_its_event(db, late_order):
    ticket = Ticket.objects.create(thread_id="t-2", order=late_order)
    assert lease.grant(ticket.pk) is not None  # new -> running, in lease.py's own UPDATE
    assert list(Event.objects.values_list("to_status", flat=True)) == ["new", "running"]


def test_a_change_rolled_back_leaves_no_event(db, late_order):
    from django.db import transaction

    ticket = Ticket.objects.create(thread_id="t-3", order=late_order)
    with pytest.raises(RuntimeError), transaction.atomic():
        Ticket.objects.filter(pk=ticket.pk).update(status="failed")
        raise RuntimeError("rolled back")
    assert list(Event.objects.values_list("to_status", flat=True)) == ["new"]


# --- delivery ------------------------------------------------------------------------------------
def test_a_real_run_is_delivered_signed_in_order(db, endpoint, receiver, agent):
    from tests.conftest import make_order

    make_order("5042", late=3, fee_cents=850, name="Hook Receiver")
    ticket = services.ticket_open(order_number="5042", opened_by=agent)
    assert runner.advance(ticket.pk) == "awaiting_review"

    counts = delivery.deliver_due()

    assert counts["delivered"] == 3
    assert statuses(receiver) == [(None, "new"), ("new", "running"), ("running", "awaiting_review")]
    assert receiver.bad_signatures == 0
    first = receiver.received[0]["headers"]
    assert first["Content-Type"] == "application/json"
    assert first[signing.HEADER].startswith("t=")
    last = receiver.accepted[-1]
    assert last["type"] == "ticket.status_changed"
    assert last["data"]["ticket"] | {"url": None} == {
        "id": ticket.pk,
        "thread_id": ticket.thread_id,
        "order_number": "5042",
        "status": "awaiting_review",
        "previous_status": "running",
        "amount_cents": 850,
        "required_role": "agent",
        "refund_state": None,  # not refunded (tests/test_refund_progress.py: when it is)
        "refund_words": None,
        "url": None,
    }
    assert Delivery.objects.filter(status="sent").count() == 3
    assert Attempt.objects.filter(status_code=200).count() == 3


def test_a_refunds_event_carries_its_parts_and_which_items_come_back(
    db, endpoint, receiver, agent, manager
):
    from tests.conftest import give_lines, make_order
    from tests.reviewing import refunded_by_parts

    order = give_lines(
        make_order("5047", fee_cents=699, name="Stock Keeper"),
        [("Ceramic vase", 2400, 2), ("Linen runner", 2450, 1)],
    )
    vase, runner_line = order.lines.order_by("id")
    ticket = refunded_by_parts(
        "5047",
        [
            {"line": vase.pk, "quantity": 1, "restock": True},
            {"line": runner_line.pk, "quantity": 1, "amount_cents": 1000},
            {"shipping": True},
        ],
        opened_by=agent,
        reviewer=manager,
    )

    delivery.deliver_due()

    refunded = [e for e in receiver.accepted if e["data"]["ticket"]["status"] == "refunded"]
    (event,) = refunded
    (charge,) = ticket.charges.all()
    assert event["data"]["refunds"] == [
        {
            "order_number": "5047",
            "amount_cents": 2400 + 1000 + 699,
            "receipt": charge.receipt,
            "parts": [
                {
                    "line_id": "L1",
                    "sku": "SKU-1",
                    "title": "Ceramic vase",
                    "quantity": 1,
                    "amount_cents": 2400,
                    "restock": True,
                },
                {
                    "line_id": "L2",
                    "sku": "SKU-2",
                    "title": "Linen runner",
                    "quantity": 1,
                    "amount_cents": 1000,
                    "restock": False,
                },
                {"shipping": True, "amount_cents": 699},
            ],
        }
    ]
    # Only the refund's own event carries what it gave back.
    assert all("refunds" not in e["data"] for e in receiver.accepted if e is not event)


def test_a_receiver_with_the_wrong_secret_refuses_and_the_delivery_is_retried(
    db, endpoint, receiver, late_order
):
    receiver.secret = "whsec_not-the-one"
    Ticket.objects.create(thread_id="t-4", order=late_order)
    assert delivery.deliver_due()["retrying"] == 1
    assert receiver.bad_signatures == 1 and receiver.accepted == []
    assert Delivery.objects.get().last_status_code == 400


def test_a_failed_delivery_is_retried_with_backoff_then_delivered(
    db, endpoint, receiver, late_order, settings
):
    settings.WEBHOOK_RETRY_BASE_SECONDS = 60
    receiver.fail_next = 2
    Ticket.objects.create(thread_id="t-5", order=late_order)

    assert delivery.deliver_due() == {
        "delivered": 0,
        "retrying": 1,
        "failed": 0,
        "skipped": 0,
        "deferred": 0,
    }
    row = Delivery.objects.get()
    assert row.status == "pending" and row.attempts == 1 and row.last_status_code == 500
    wait = row.next_attempt_at - timezone.now()
    assert timedelta(seconds=55) < wait <= timedelta(seconds=60)
    assert delivery.deliver_due()["delivered"] == 0  # not due yet: nothing sent
    assert len(receiver.received) == 1

    Delivery.objects.update(next_attempt_at=timezone.now())
    delivery.deliver_due()
    row.refresh_from_db()
    assert row.attempts == 2
    assert row.next_attempt_at - timezone.now() > timedelta(seconds=115)  # doubled

    Delivery.objects.update(next_attempt_at=timezone.now())
    assert delivery.deliver_due()["delivered"] == 1
    row.refresh_from_db()
    assert row.status == "sent" and row.attempts == 3
    assert list(row.log.values_list("status_code", flat=True)) == [500, 500, 200]
    assert len(receiver.accepted) == 1


def test_attempts_run_out_then_send_again_delivers_once_more(
    db, endpoint, receiver, late_order, settings
):
    settings.WEBHOOK_MAX_ATTEMPTS = 2
    settings.WEBHOOK_RETRY_BASE_SECONDS = 0
    receiver.fail_next = 5
    Ticket.objects.create(thread_id="t-6", order=late_order)
    delivery.deliver_due()
    assert delivery.deliver_due()["failed"] == 1
    row = Delivery.objects.get()
    assert row.status == "failed"
    assert delivery.deliver_due()["failed"] == 0  # left alone until someone asks

    receiver.fail_next = 0
    assert delivery.send_again([row.pk]) == 1
    assert delivery.deliver_due()["delivered"] == 1
    assert Delivery.objects.get().status == "sent"


def test_a_duplicate_is_detectable_by_its_event_id(db, endpoint, receiver, late_order):
    Ticket.objects.create(thread_id="t-7", order=late_order)
    delivery.deliver_due()
    row = Delivery.objects.get()
    delivery.send_again([row.pk])  # as after a lost answer, or an admin's press
    delivery.deliver_due()

    assert len(receiver.received) == 2
    ids = [r["headers"][signing.EVENT_ID_HEADER] for r in receiver.received]
    assert ids[0] == ids[1] == f"evt_{row.event_id}"
    assert receiver.duplicates == [ids[0]] and len(receiver.accepted) == 1


def test_a_stale_claim_is_taken_over_and_sent_with_the_same_event_id(
    db, endpoint, receiver, late_order
):
    Ticket.objects.create(thread_id="t-8", order=late_order)
    delivery.fan_out()
    long_ago = timezone.now() - timedelta(minutes=10)
    Delivery.objects.update(status="sending", claimed_by="dead-sender", claimed_at=long_ago)
    assert delivery.deliver_due()["delivered"] == 1
    fresh = timezone.now()
    Delivery.objects.update(status="sending", claimed_by="live-sender", claimed_at=fresh)
    assert delivery.deliver_due()["delivered"] == 0  # a live sender's claim is left alone


def test_a_delivery_another_sweep_claimed_after_this_one_chose_it_is_not_sent_twice(
    transactional_db, endpoint, receiver
):
    """Two sweeps may choose the same due delivery: the claim (core/outbox.py's compare-and-set)
    gives it to one. The other sweep claims the second delivery while this one posts the first."""
    for n in range(2):
        Ticket.objects.create(thread_id=f"t-race-{n}", order=_another_order(n))
    delivery.fan_out()
    second = Delivery.objects.order_by("id").last()
    assert second is not None

    def another_sweep_claims_the_second() -> None:
        Delivery.objects.filter(pk=second.pk).update(
            status="sending", claimed_by="another-sweep", claimed_at=timezone.now()
        )
        connection.close()  # the receiver's thread is done with the database

    receiver.on_post = another_sweep_claims_the_second
    counts = delivery.deliver_due()

    assert (counts["delivered"], counts["skipped"]) == (1, 1)
    assert len(receiver.received) == 1
    assert Delivery.objects.get(pk=second.pk).claimed_by == "another-sweep"


def test_an_endpoint_gets_only_the_statuses_it_asked_for(db, receiver, late_order):
    Endpoint.objects.create(url=receiver.url, statuses=["refunded", "declined"])
    ticket = Ticket.objects.create(thread_id="t-9", order=late_order)
    Ticket.objects.filter(pk=ticket.pk).update(status="declined")
    delivery.fan_out()
    assert list(Delivery.objects.values_list("event__to_status", flat=True)) == ["declined"]
    assert Event.objects.count() == 1  # events no endpoint wanted are not kept


def test_an_inactive_endpoint_gets_nothing(db, receiver, late_order):
    Endpoint.objects.create(url=receiver.url, active=False)
    Ticket.objects.create(thread_id="t-10", order=late_order)
    assert delivery.deliver_due()["delivered"] == 0
    assert receiver.received == []


def test_an_unreachable_endpoint_is_logged_and_retried(db, late_order):
    Endpoint.objects.create(url=f"http://127.0.0.1:{free_port()}/nobody")
    Ticket.objects.create(thread_id="t-11", order=late_order)
    assert delivery.deliver_due()["retrying"] == 1
    attempt = Attempt.objects.get()
    assert attempt.status_code is None and "ConnectError" in attempt.error


# --- signing ------------------------------------------------------------------------------------
def test_a_signature_checks_out_only_for_its_body_secret_and_time():
    body = b'{"id":"evt_1"}'
    header = signing.sign("whsec_a", body, timestamp=1_000_000)
    assert signing.verify("whsec_a", body, header, now=1_000_010) == 1_000_000
    for secret, raw, now in [
        ("whsec_b", body, 1_000_010),
        ("whsec_a", b'{"id":"evt_2"}', 1_000_010),
        ("whsec_a", body, 1_000_000 + 301),  # a replay after the tolerance
    ]:
        with pytest.raises(signing.BadSignature):
            signing.verify(secret, raw, header, now=now)
    forged = header.replace("t=1000000", "t=1000200")  # a new timestamp on an old signature
    with pytest.raises(signing.BadSignature):
        signing.verify("whsec_a", body, forged, now=1_000_200)


# --- admin ---------------------------------------------------------------------------------------
def test_admins_register_an_endpoint_and_see_its_secret(client, admin_user):
    client.force_login(admin_user)
    response = client.post(
        "/admin/webhooks/endpoint/add/",
        {
            "url": "https://helpdesk.example.com/hooks",
            "description": "desk",
            "statuses": "[]",
            "active": "on",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    made = Endpoint.objects.get()
    assert made.secret.startswith("whsec_")
    page = client.get(f"/admin/webhooks/endpoint/{made.pk}/change/").content.decode()
    assert made.secret in page


def test_the_delivery_log_and_the_send_again_button(
    client, admin_user, endpoint, receiver, late_order
):
    receiver.fail_next = 1
    Ticket.objects.create(thread_id="t-12", order=late_order)
    delivery.deliver_due()
    row = Delivery.objects.get()
    client.force_login(admin_user)
    page = client.get(f"/admin/webhooks/delivery/{row.pk}/change/").content.decode()
    assert "delivery log" in page.lower() and "500" in page
    listed = client.get("/admin/webhooks/delivery/").content.decode()
    assert f"evt_{row.event_id}" in listed and f">{row.ticket_id}<" in listed
    assert client.get(f"/admin/webhooks/delivery/{row.pk}/send-again/").status_code == 200
    Delivery.objects.update(next_attempt_at=timezone.now() + timedelta(hours=1))
    response = client.post(f"/admin/webhooks/delivery/{row.pk}/send-again/")
    assert response.status_code == 302
    assert delivery.deliver_due()["delivered"] == 1


def test_an_agent_cannot_see_webhooks_in_admin(client, db):
    from tests.conftest import _persona

    staff_agent = _persona("staffagent", "Support agents", is_staff=True)
    client.force_login(staff_agent)
    assert client.get("/admin/webhooks/endpoint/").status_code == 403


def test_the_trigger_exists_on_this_database(db):
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        else:
            cursor.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
        names = {row[0] for row in cursor.fetchall()}
    assert names & {"webhooks_ticket_status_changed", "webhooks_ticket_status_event"}
    # A migration that rebuilds refunds_charge on SQLite drops this one: it must make it again.
    assert names & {"webhooks_refund_state_changed", "webhooks_refund_state_event"}


# --- one slow receiver delays no one else ---------------------------------------------------------
class Blackhole:
    """An endpoint that takes the connection and never answers: the kernel completes the
    handshake into the listen backlog, nobody ever reads."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/hooks"

    def close(self) -> None:
        self.socket.close()


class Dripper:
    """An endpoint that answers one header byte every `every` seconds for `lasting` seconds:
    each read succeeds well within any per-read timeout."""

    def __init__(self, every: float = 0.2, lasting: float = 8.0) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(4)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/hooks"
        self.every, self.lasting = every, lasting
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.socket.accept()
        except OSError:
            return
        with conn:
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            until = time.monotonic() + self.lasting
            while not self.stopped.wait(self.every) and time.monotonic() < until:
                try:
                    conn.sendall(b"X")
                except OSError:
                    return

    def close(self) -> None:
        self.stopped.set()
        self.socket.close()


def test_a_receiver_that_never_answers_does_not_delay_a_healthy_one(db, settings, receiver):
    settings.WEBHOOK_TIMEOUT = 3.0
    blackhole = Blackhole()
    try:
        # The silent endpoint is older: sent one after the other, it would go first every time.
        silent = Endpoint.objects.create(url=blackhole.url, description="silent")
        healthy = Endpoint.objects.create(url=receiver.url, description="healthy")
        receiver.secret = healthy.secret
        for n in range(3):
            Ticket.objects.create(thread_id=f"t-par-{n}", order=_another_order(n))

        started = time.monotonic()
        counts = delivery.deliver_due()
        took = time.monotonic() - started

        assert len(receiver.accepted) == 3
        assert max(receiver.received_at) - started < 2.0  # not 3 s behind each silent attempt
        assert counts == {
            "delivered": 3,
            "retrying": 1,
            "failed": 0,
            "skipped": 0,
            "deferred": 2,
        }  # one timeout for the silent endpoint; its other two wait for the next sweep
        assert took < settings.WEBHOOK_TIMEOUT + 2.0
        stuck = Delivery.objects.filter(endpoint=silent, attempts=1).get()
        assert stuck.status == "pending" and stuck.next_attempt_at > timezone.now()
        assert "ReadTimeout" in stuck.last_error

        # The next sweep tries the silent endpoint again; the healthy one gets nothing twice.
        assert delivery.deliver_due()["delivered"] == 0
        assert len(receiver.received) == 3 and receiver.duplicates == []
        assert Delivery.objects.filter(endpoint=silent, attempts=1).count() == 2
    finally:
        blackhole.close()


def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_timeout(db, settings, late_order):
    settings.WEBHOOK_TIMEOUT = 1.0
    dripper = Dripper(every=0.2)  # each read gets a byte long before 1 s
    try:
        Endpoint.objects.create(url=dripper.url)
        Ticket.objects.create(thread_id="t-drip", order=late_order)
        started = time.monotonic()
        assert delivery.deliver_due()["retrying"] == 1
        assert time.monotonic() - started < 2.5
        assert "Timeout" in Delivery.objects.get().last_error
    finally:
        dripper.close()


def test_a_sweep_claims_nothing_new_after_its_budget(db, settings, receiver, endpoint):
    settings.WEBHOOK_SWEEP_BUDGET_SECONDS = 1.0
    receiver.delay = 0.4
    for n in range(6):
        Ticket.objects.create(thread_id=f"t-budget-{n}", order=_another_order(n))

    started = time.monotonic()
    first = delivery.deliver_due()
    took = time.monotonic() - started

    assert 1 <= first["delivered"] < 6 and first["deferred"] == 6 - first["delivered"]
    assert took < 1.0 + settings.WEBHOOK_TIMEOUT
    while Delivery.objects.exclude(status="sent").exists():
        assert delivery.deliver_due()["delivered"] >= 1
    assert len(receiver.accepted) == 6 and receiver.duplicates == []


def _another_order(n: int):
    from tests.conftest import make_order

    return make_order(f"77{n:02d}", late=3, fee_cents=500, name=f"Customer {n}")
