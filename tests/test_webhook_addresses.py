"""Webhooks never go inside: an endpoint's URL is refused when it is saved if it names a
loopback, link-local (cloud metadata), private, multicast, unspecified or reserved address, user
info, or a scheme other than https (http only where allowed); and again when a delivery
connects, after DNS, to the address it connects to. Resolution is injected at the library's own
seam, socket.getaddrinfo; the receivers are real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.core.exceptions import ValidationError

from devtools.smtp_sink import free_port
from refunds.models import Ticket
from tests.test_webhooks import Receiver
from webhooks import addresses, delivery
from webhooks.models import Attempt, Delivery, Endpoint

REFUSED = [
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://127.0.0.1:8000/api/", "loopback"),
    ("https://127.1/", "loopback"),  # the C resolver's short spelling
    ("https://2130706433/", "loopback"),  # 127.0.0.1 as one number
    ("https://0x7f.0.0.1/", "loopback"),
    ("https://localhost:8000/", "this machine"),
    ("https://desk.localhost/", "this machine"),
    ("https://metadata.google.internal/computeMetadata/v1/", "private network"),
    ("https://[::1]/", "loopback"),
    ("https://[::ffff:127.0.0.1]/", "loopback"),  # IPv4-mapped
    ("https://[fd00:ec2::254]/", "private"),  # AWS metadata over IPv6
    ("https://[fe80::1]/", "link-local"),
    ("https://0.0.0.0/", "unspecified"),
    ("https://10.0.0.5/", "private"),
    ("https://172.16.3.4/", "private"),
    ("https://192.168.1.1/", "private"),
    ("https://100.100.100.200/", "not a public address"),  # Alibaba's metadata, shared space
    ("https://224.0.0.1/", "multicast"),
    ("https://240.0.0.1/", "reserved"),
    ("https://user@127.0.0.1/", "no user name or password"),
    ("https://user:pw@helpdesk.example.com/hooks", "no user name or password"),
    ("http://helpdesk.example.com/hooks", "plain http"),
    ("ftp://helpdesk.example.com/hooks", "https://"),
]
NUMERIC_SPELLINGS = {"https://127.1/", "https://2130706433/", "https://0x7f.0.0.1/"}


@pytest.fixture(autouse=True)
def _production(settings) -> None:
    settings.WEBHOOK_ALLOW_HTTP = False
    settings.WEBHOOK_ALLOW_PRIVATE = False


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


@pytest.fixture
def resolve_to(monkeypatch):
    """Make names resolve to chosen addresses, as a DNS server would; every other name (and every
    literal address) goes to the real resolver."""
    real = socket.getaddrinfo
    table: dict[str, list[str]] = {}

    def getaddrinfo(host, port, *args, **kwargs):
        if host in table:
            return [
                (
                    socket.AF_INET6 if ":" in ip else socket.AF_INET,
                    socket.SOCK_STREAM,
                    6,
                    "",
                    (ip, port),
                )
                for ip in table[host]
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


# --- when an admin saves the endpoint ------------------------------------------------------------
@pytest.mark.parametrize(("url", "words"), REFUSED)
def test_an_inside_or_unsafe_url_is_refused_with_a_reason(url, words):
    with pytest.raises(ValidationError, match=words):
        addresses.validate_webhook_url(url)


@pytest.mark.parametrize(("url", "words"), REFUSED)
def test_admin_refuses_to_save_it_and_says_why(client, admin_user, url, words):
    client.force_login(admin_user)
    response = client.post(
        "/admin/webhooks/endpoint/add/",
        {"url": url, "description": "inside", "statuses": "[]", "active": "on"},
    )
    assert response.status_code == 200  # the form again, not a redirect
    page = response.content.decode()
    # Django's own URL check answers first for the numeric spellings it does not parse.
    assert (words if url not in NUMERIC_SPELLINGS else "Enter a valid URL") in page
    assert f'href="{url}' not in page  # not offered as a link either
    assert not Endpoint.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://helpdesk.example.com/hooks/refund-desk",
        "https://93.184.215.14:8443/hooks",
        "https://[2606:4700::6810:84e5]/hooks",
    ],
)
def test_a_public_https_url_is_accepted(url):
    addresses.validate_webhook_url(url)


def test_plain_http_is_accepted_where_allowed_and_private_only_when_asked(settings):
    settings.WEBHOOK_ALLOW_HTTP = True
    addresses.validate_webhook_url("http://helpdesk.example.com/hooks")
    with pytest.raises(ValidationError, match="loopback"):
        addresses.validate_webhook_url("http://127.0.0.1:9000/hooks")
    settings.WEBHOOK_ALLOW_PRIVATE = True
    addresses.validate_webhook_url("http://127.0.0.1:9000/hooks")
    with pytest.raises(ValidationError, match="no user name"):
        addresses.validate_webhook_url("http://user:pw@127.0.0.1:9000/hooks")


# --- when a delivery connects --------------------------------------------------------------------
def test_a_name_that_resolves_inside_is_refused_at_send_and_nothing_is_sent(
    db, settings, receiver, resolve_to, late_order
):
    settings.WEBHOOK_ALLOW_HTTP = True  # the receiver speaks http; the address is what is refused
    resolve_to["hooks.helpdesk.example"] = ["127.0.0.1"]  # the receiver is right there
    Endpoint.objects.create(url=f"http://hooks.helpdesk.example:{receiver.port}/hooks")
    Ticket.objects.create(thread_id="t-dns", order=late_order)

    counts = delivery.deliver_due()

    assert counts["failed"] == 1 and receiver.received == []
    row = Delivery.objects.get()
    assert row.status == "failed" and row.attempts == 1  # not retried into the same wall
    assert "hooks.helpdesk.example resolves to 127.0.0.1, a loopback address" in row.last_error
    assert Attempt.objects.get().status_code is None


def test_one_inside_address_among_public_ones_refuses_the_name(
    db, settings, receiver, resolve_to, late_order
):
    settings.WEBHOOK_ALLOW_HTTP = True
    resolve_to["hooks.helpdesk.example"] = ["93.184.215.14", "169.254.169.254"]
    Endpoint.objects.create(url=f"http://hooks.helpdesk.example:{receiver.port}/hooks")
    Ticket.objects.create(thread_id="t-dns-2", order=late_order)
    assert delivery.deliver_due()["failed"] == 1
    assert "169.254.169.254, a link-local address" in Delivery.objects.get().last_error


def test_the_name_is_sent_to_the_address_it_resolved_to_with_its_own_host_header(
    db, settings, receiver, resolve_to, late_order
):
    """Where private addresses are allowed (a receiver on the office network), the connection
    still goes to the resolved address, and the Host header keeps the name."""
    settings.WEBHOOK_ALLOW_HTTP = settings.WEBHOOK_ALLOW_PRIVATE = True
    resolve_to["hooks.helpdesk.example"] = ["127.0.0.1"]
    made = Endpoint.objects.create(url=f"http://hooks.helpdesk.example:{receiver.port}/hooks")
    receiver.secret = made.secret
    Ticket.objects.create(thread_id="t-dns-3", order=late_order)
    assert delivery.deliver_due()["delivered"] == 1
    assert receiver.received[0]["headers"]["Host"] == f"hooks.helpdesk.example:{receiver.port}"


@pytest.mark.parametrize(
    ("template", "private_allowed"),
    [
        ("http://127.0.0.1:{port}/hooks", False),  # written before the rules, or around admin
        ("http://user:pw@127.0.0.1:{port}/hooks", True),  # refused for its user info alone
        ("ftp://127.0.0.1:{port}/hooks", True),  # for its scheme alone
    ],
)
def test_an_existing_row_with_a_bad_url_is_refused_at_send_not_followed(
    db, settings, receiver, late_order, template, private_allowed
):
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_ALLOW_PRIVATE = private_allowed
    made = Endpoint.objects.create(url=template.format(port=receiver.port))
    receiver.secret = made.secret
    Ticket.objects.create(thread_id="t-old", order=late_order)
    assert delivery.deliver_due()["failed"] == 1
    assert receiver.received == []
    row = Delivery.objects.get()
    assert row.last_error.startswith("refused: ") and row.attempts == 1


def test_a_redirect_is_not_followed(db, settings, late_order):
    """A public receiver that answers 307 to an inside address gets a retry, not a visit."""
    settings.WEBHOOK_ALLOW_HTTP = settings.WEBHOOK_ALLOW_PRIVATE = True
    inside = Receiver().start()
    redirector = Receiver().start()
    redirector.redirect_to = inside.url
    try:
        Endpoint.objects.create(url=redirector.url)
        Ticket.objects.create(thread_id="t-redirect", order=late_order)
        assert delivery.deliver_due()["retrying"] == 1
        assert len(redirector.received) == 1 and inside.received == []
        assert Delivery.objects.get().last_status_code == 307
    finally:
        inside.stop()
        redirector.stop()


def test_a_unix_socket_is_never_a_target():
    with pytest.raises(addresses.UnsafeURL):
        addresses.CheckedBackend().connect_unix_socket(f"/tmp/{free_port()}.sock")
