"""Typed gateway errors. No Django imports: the graph's retry policy names them."""


class GatewayError(Exception):
    permanent = False


class RetryableGatewayError(GatewayError):
    """A timeout or 5xx: the same idempotency key may be tried again."""


class PermanentGatewayError(GatewayError):
    """A decline or bad request: trying again will not help; a person decides."""

    permanent = True
