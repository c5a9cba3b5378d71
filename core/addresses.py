"""The caller's address, one rule for every limit (the API's, the login's, django-axes'
lockout): REMOTE_ADDR, or, when the request comes from a trusted proxy's address
(TRUSTED_PROXY_IPS) behind TRUSTED_PROXY_COUNT proxies that each append the address they saw to
X-Forwarded-For, the entry the outermost trusted proxy appended (DRF's NUM_PROXIES rule).
Entries further left are whatever the client wrote and are never believed; nor is the header of a
caller that reached the app directly, not through the proxy (it would choose its own address)."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    remote = request.META.get("REMOTE_ADDR", "") or "unknown"
    proxies = settings.TRUSTED_PROXY_COUNT
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies and forwarded and _from_a_trusted_proxy(remote):
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        if hops:
            return hops[-min(proxies, len(hops))]
    return remote


def client_ip(request: HttpRequest) -> str | None:
    """client_address() when it is an IP address, else None: for django-axes, which stores it
    in an address column (PostgreSQL's inet refuses anything else; a request built in code,
    like Django's test client's force_login, has none)."""
    address = client_address(request)
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def _from_a_trusted_proxy(remote: str) -> bool:
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    return any(address in network for network in settings.TRUSTED_PROXY_IPS)
