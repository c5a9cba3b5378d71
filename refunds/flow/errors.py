"""Typed errors of the outside systems the workflow touches (no Django: the graph names them):
retryable (nothing happened), refused (no for good: a person decides), or unknown (it may have
landed: resolved by looking the key up, never shown as "failed, approve again")."""


class GatewayError(Exception):
    permanent = False


class RetryableGatewayError(GatewayError):
    """A 503, a refused connection: the charge did not happen; the same key may be tried again."""


class ChargeRefused(Exception):  # noqa: N818 - a refusal, not a crash
    """No money moved and trying again will not change that: a manager decides (and reads this)."""


class PermanentGatewayError(GatewayError, ChargeRefused):
    """A decline or a bad request."""

    permanent = True


class OverBalance(ChargeRefused):
    """The charge would refund more than the order's refundable balance."""


# What a manager reads when a charge stops for a dispute (the review, the card, the ticket page).
DISPUTED = "This payment is disputed: refunding it may pay the customer twice."


class PaymentDisputed(ChargeRefused):
    """The card's bank may give the money back too: no charge until a manager approves anyway."""

    def __init__(self, message: str = DISPUTED) -> None:
        super().__init__(message)


class GatewayOutcomeUnknown(GatewayError):
    """The request was sent and no answer came back (timeout, reset): the money may have moved."""


class PaymentOutcomeUnknown(Exception):  # noqa: N818
    """The answer and the lookup both failed: retried later, never told as failed."""


class EffectBusy(Exception):  # noqa: N818
    """Another process is mid-effect for the same key: this run stops and is retried later."""


class MailError(Exception):
    """Base of what sending an email raises."""


class MailRetryable(MailError):
    """The mail server is unreachable, timed out or answered 4xx: try again later."""


class MailRefused(MailError):
    """The mail server answered 5xx: this message will not be accepted as it is."""


class OrderNotFound(LookupError):
    pass
