"""How a delivery is signed (as Stripe signs): `Refund-Desk-Signature: t=<unix time>,v1=<hex
HMAC-SHA256 of f"{t}.{raw body}">`; the timestamp is signed, so a captured request cannot be
replayed later (docs/integrations.md)."""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "Refund-Desk-Signature"
EVENT_ID_HEADER = "Refund-Desk-Event-Id"
TOLERANCE_SECONDS = 300


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


class BadSignature(ValueError):
    pass


def verify(secret: str, body: bytes, header: str, *, now: float | None = None) -> int:
    """What a receiver does: return the signed timestamp, or raise BadSignature."""
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    try:
        timestamp = int(dict(parts)["t"])
    except (KeyError, ValueError):
        raise BadSignature("no timestamp in the signature header") from None
    now = time.time() if now is None else now
    if abs(now - timestamp) > TOLERANCE_SECONDS:
        raise BadSignature("the timestamp is outside the tolerance (a replay?)")
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    given = [v for k, v in parts if k == "v1"]
    if not any(hmac.compare_digest(expected, v) for v in given):
        raise BadSignature("the signature does not match")
    return timestamp
