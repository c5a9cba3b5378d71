"""The caller's address, one rule for every limit (the API's, the login's, django-axes'
lockout): REMOTE_ADDR, or, behind TRUSTED_PROXY_COUNT proxies that each append the address they
saw to X-Forwarded-For, the entry the outermost trusted proxy appended (DRF's NUM_PROXIES rule).
Entries further left are whatever the client wrote and are never believed."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    proxies = settings.TRUSTED_PROXY_COUNT
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies and forwarded:
        hops = [h.strip() for h in forwarded.split(",") if h.strip()]
        if hops:
            return hops[-min(proxies, len(hops))]
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def client_ip(request: HttpRequest) -> str | None:
    """client_address() when it is an IP address, else None: for django-axes, which stores it
    in an address column (PostgreSQL's inet refuses anything else; a request built in code,
    like Django's test client's force_login, has none)."""
    address = client_address(request)
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None
