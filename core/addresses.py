"""The caller's address, one rule for every limit (the API's, the login's, django-axes'):
REMOTE_ADDR, or behind TRUSTED_PROXY_COUNT trusted proxies the X-Forwarded-For entry the
outermost one appended (DRF's NUM_PROXIES rule). Entries further left are the client's words."""

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
    """client_address() when it is an IP address, else None: django-axes stores it in an
    address column (PostgreSQL's inet refuses anything else)."""
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
