"""Logins behind a TLS proxy: django-axes locks one (user name, real client address) pair, one
address trying many names is throttled, and both answers say when to come back (Retry-After).
X-Forwarded-For is believed only from the proxy's own address (TRUSTED_PROXY_IPS)."""

from __future__ import annotations

import ipaddress

import pytest
from axes.models import AccessAttempt
from django.test import Client

PROXY = "10.0.0.2"  # every request reaches gunicorn from the proxy


def through_proxy(client_address: str, *, spoofed: str = "") -> Client:
    """A browser at `client_address` behind one proxy that appends what it saw to the header."""
    forwarded = f"{spoofed}, {client_address}" if spoofed else client_address
    return Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=forwarded)


@pytest.fixture
def behind_proxy(settings):
    settings.TRUSTED_PROXY_COUNT = 1
    settings.TRUSTED_PROXY_IPS = [ipaddress.ip_network(PROXY)]
    return settings


def wrong(client: Client, username: str, url: str = "/login/"):
    return client.post(url, {"username": username, "password": "wrong"})


def test_a_lockout_through_the_proxy_locks_only_that_client_address(behind_proxy, admin_user):
    attacker = through_proxy("203.0.113.9")
    for _ in range(behind_proxy.AXES_FAILURE_LIMIT):
        wrong(attacker, "admin")
    assert wrong(attacker, "admin").status_code == 429
    assert wrong(attacker, "admin", "/admin/login/").status_code == 429

    colleague = through_proxy("198.51.100.7")
    assert colleague.post("/login/", {"username": "admin", "password": "pw"}).status_code == 302
    other = through_proxy("198.51.100.8")
    admin_login = other.post("/admin/login/", {"username": "admin", "password": "pw"})
    assert admin_login.status_code == 302


def test_a_header_the_client_wrote_itself_does_not_dodge_the_lockout(behind_proxy, admin_user):
    for n in range(behind_proxy.AXES_FAILURE_LIMIT):
        wrong(through_proxy("203.0.113.9", spoofed=f"192.0.2.{n}"), "admin")
    fresh_spoof = through_proxy("203.0.113.9", spoofed="192.0.2.200")
    assert fresh_spoof.post("/login/", {"username": "admin", "password": "pw"}).status_code == 429


def test_the_lockout_answer_says_when_to_come_back(behind_proxy, agent):
    attacker = through_proxy("203.0.113.9")
    for _ in range(behind_proxy.AXES_FAILURE_LIMIT):
        wrong(attacker, "agent")
    locked = attacker.post("/login/", {"username": "agent", "password": "pw"})
    assert locked.status_code == 429
    assert locked["Retry-After"] == str(int(behind_proxy.AXES_COOLOFF_TIME.total_seconds()))


def test_one_address_trying_many_user_names_is_throttled(behind_proxy, agent):
    behind_proxy.LOGIN_FAILURES_PER_IP = "20/hour"
    guesser = through_proxy("203.0.113.50")
    for n in range(20):
        assert wrong(guesser, f"name{n}").status_code == 200  # the form again, with its error
    refused = guesser.post("/login/", {"username": "agent", "password": "pw"})
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 3600
    assert b"Too many wrong passwords came from this address" in refused.content
    assert wrong(guesser, "name99", "/admin/login/").status_code == 429
    # Colleagues at other addresses are not held back by it.
    colleague = through_proxy("198.51.100.7")
    assert colleague.post("/login/", {"username": "agent", "password": "pw"}).status_code == 302


def test_a_direct_caller_with_a_forged_header_is_locked_out_under_its_own_address(
    behind_proxy, admin_user
):
    # Straight to gunicorn's port, not through the proxy: its X-Forwarded-For is its own words,
    # and a fresh forged address per try must not give it a fresh lockout count.
    for n in range(behind_proxy.AXES_FAILURE_LIMIT):
        wrong(Client(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}"), "admin")
    forged = Client(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert forged.post("/login/", {"username": "admin", "password": "pw"}).status_code == 429
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.9"}

    # The colleague whose address it forged, coming through the proxy, is not locked out.
    colleague = through_proxy("198.51.100.7")
    assert colleague.post("/login/", {"username": "admin", "password": "pw"}).status_code == 302


def test_by_default_only_a_proxy_on_this_machine_is_trusted(settings, admin_user):
    settings.TRUSTED_PROXY_COUNT = 1
    assert [str(n) for n in settings.TRUSTED_PROXY_IPS] == ["127.0.0.1/32", "::1/128"]
    local_proxy = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    wrong(local_proxy, "admin")
    elsewhere = Client(REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="203.0.113.10")
    wrong(elsewhere, "admin")
    addresses = set(AccessAttempt.objects.values_list("ip_address", flat=True))
    assert addresses == {"203.0.113.9", "10.0.0.9"}
