"""How a delivery is signed, and how a receiver checks it (the same scheme as Stripe's):

    Refund-Desk-Signature: t=1767225600,v1=5257a869e7ec...(64 hex digits)

`v1` is the hex HMAC-SHA256, keyed with the endpoint's secret, of `f"{t}.{raw body}"`. The
timestamp is inside what is signed, so a captured request cannot be replayed later with a new
timestamp; a receiver refuses timestamps older than its tolerance (5 minutes here)."""

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


def verify(
    secret: str,
    body: bytes,
    header: str,
    *,
    tolerance: int = TOLERANCE_SECONDS,
    now: float | None = None,
) -> int:
    """What a receiver does: return the signed timestamp, or raise BadSignature."""
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    try:
        timestamp = int(dict(parts)["t"])
    except (KeyError, ValueError):
        raise BadSignature("no timestamp in the signature header") from None
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance:
        raise BadSignature("the timestamp is outside the tolerance (a replay?)")
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    given = [v for k, v in parts if k == "v1"]
    if not any(hmac.compare_digest(expected, v) for v in given):
        raise BadSignature("the signature does not match")
    return timestamp
