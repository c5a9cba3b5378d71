"""Typed errors of the outside systems the workflow touches. No Django imports: the graph's retry
policies and nodes name them.

Three kinds, for money and mail alike:
- *retryable*: nothing happened, or trying again with the same key is harmless;
- *refused*: the other side said no for good; no money moved, a person decides what next;
- *unknown*: the request may have landed (a timeout or a reset after sending). Money in that state
  is resolved by looking the idempotency key up, never by guessing; an unknown outcome is never
  shown to a person as "failed, approve again".
"""


class GatewayError(Exception):
    """Base of what a payment gateway raises."""

    permanent = False


class RetryableGatewayError(GatewayError):
    """A 503, a refused connection: the charge did not happen; the same key may be tried again."""


class ChargeRefused(Exception):  # noqa: N818 - a refusal, not a crash
    """No money moved and trying again will not change that: a manager decides what happens next.
    The message is shown to the manager."""


class PermanentGatewayError(GatewayError, ChargeRefused):
    """A decline or a bad request."""

    permanent = True


class OverBalance(ChargeRefused):
    """The charge would refund more than the order's refundable balance."""


# What a manager reads when a charge stops for a dispute (the review, the card, the ticket page).
DISPUTED = "This payment is disputed: refunding it may pay the customer twice."


class PaymentDisputed(ChargeRefused):
    """The payment has a dispute still open at the processor: the card's bank may give the money
    back too, so the charge is not made until a manager has seen this and approves all the
    same."""

    def __init__(self, message: str = DISPUTED) -> None:
        super().__init__(message)


class GatewayOutcomeUnknown(GatewayError):
    """The request was sent and no answer came back (timeout, reset): the money may have moved."""


class PaymentOutcomeUnknown(Exception):  # noqa: N818
    """The gateway's answer was lost and looking the key up failed too: the run stops and is
    retried later; nobody is told the charge failed, because it may not have."""


class EffectBusy(Exception):  # noqa: N818
    """Another process is in the middle of this effect (a charge or an email) for the same key:
    this run stops and the thread is retried later, after that process finished or died."""


class MailError(Exception):
    """Base of what sending an email raises."""


class MailRetryable(MailError):
    """The mail server is unreachable, timed out or answered 4xx: try again later."""


class MailRefused(MailError):
    """The mail server answered 5xx: this message will not be accepted as it is."""


class OrderNotFound(LookupError):
    pass
