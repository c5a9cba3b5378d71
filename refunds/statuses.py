"""Statuses and answers, and what each means for the raw SQL and the ORM: one home for both."""

from __future__ import annotations

from django.db import models


class TicketStatus(models.TextChoices):
    NEW = "new", "New"
    RUNNING = "running", "Running"
    AWAITING_REVIEW = "awaiting_review", "Awaiting review"
    AWAITING_CUSTOMER = "awaiting_customer", "Waiting on the customer"
    AWAITING_RETURN = "awaiting_return", "Waiting for the goods to come back"
    # No reply, and REFUNDS_ASK_DEFAULT_OUTCOME is "close": still waiting, so a reply reopens it.
    CLOSED = "closed", "Closed: no reply from the customer"
    REFUNDED = "refunded", "Refunded"
    DECLINED = "declined", "Declined by policy"
    REJECTED = "rejected", "Rejected by reviewer"
    FAILED = "failed", "Failed"


class ChargeStatus(models.TextChoices):
    PENDING = "pending", "Under way"
    SUCCEEDED = "succeeded", "Paid"
    REFUSED = "refused", "Refused"


class ProcessorStatus(models.TextChoices):
    """What the processor last said of a refund it accepted; "" not known (shown as "Refunded")."""

    UNKNOWN = "", "Not reported"
    PENDING = "pending", "On its way"
    REQUIRES_ACTION = "requires_action", "Waiting on the customer"
    SUCCEEDED = "succeeded", "Refunded"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"


class EmailStatus(models.TextChoices):  # where an email is, as the API says it
    PENDING = "pending", "Not sent yet"
    SENDING = "sending", "Sending"
    SENT = "sent", "Delivered to the mail server"


class OutboxStatus(models.TextChoices):
    """Where an outbox row is: an email's statuses, and a webhook's whose attempts ran out."""

    PENDING = "pending", "Not sent yet"
    SENDING = "sending", "Sending"
    SENT = "sent", "Delivered"  # to the mail server, or a 2xx from a webhook's endpoint
    FAILED = "failed", "Failed (attempts ran out)"  # mail waits for an admin instead


class OutboxKind(models.TextChoices):
    """Who delivers an outbox row: refunds/mail.py, or webhooks/delivery.py."""

    EMAIL = "email", "Customer email"
    WEBHOOK = "webhook", "Webhook delivery"


class EmailDelivery(models.TextChoices):
    """What the mail provider's tracking webhook last said of a message ("" until it says)."""

    UNKNOWN = "", "Not reported"
    DELIVERED = "delivered", "Delivered"
    BOUNCED = "bounced", "Bounced"
    COMPLAINED = "complained", "Marked as spam"
    FAILED = "failed", "Failed"


class DecisionAnswer(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    ASK = "ask", "Ask the customer"  # the thread then waits on the customer's reply
    REPLY = "reply", "The customer's reply"  # recorded by the inbound mail, no reviewer
    NO_REPLY = "no_reply", "No reply from the customer"  # the wait's timer, no reviewer
    # The goods' wait (a refund on return): the warehouse's word, or the wait's timer.
    RECEIVED = "received", "The goods came back"
    FLAGGED = "flagged", "The return was flagged"
    NO_RETURN = "no_return", "Nothing came back in time"
    # The customer's choice of an offer of store credit ("money" too when the wait ends).
    CREDIT = "credit", "The customer chose store credit"
    MONEY = "money", "Money back (the customer's choice, or the wait's end)"


S = TicketStatus
# Whether a worker may take the thread's lease: not once final, nor failed (an admin retries).
TICKET_LEASABLE = {
    S.NEW: True,
    S.RUNNING: True,
    S.AWAITING_REVIEW: True,
    S.AWAITING_CUSTOMER: True,
    S.AWAITING_RETURN: True,
    S.CLOSED: True,  # a reply reopens it: the runner resumes its wait under the lease
    S.REFUNDED: False,
    S.DECLINED: False,
    S.REJECTED: False,
    S.FAILED: False,
}
# Work left for a worker with no person's answer needed: never run, or its run stopped.
TICKET_WORK_LEFT = {
    S.NEW: True,
    S.RUNNING: True,
    S.AWAITING_REVIEW: False,
    S.AWAITING_CUSTOMER: False,
    S.AWAITING_RETURN: False,
    S.CLOSED: False,
    S.REFUNDED: False,
    S.DECLINED: False,
    S.REJECTED: False,
    S.FAILED: False,
}
# Charges that count against an order's balance: paid, or under way (maybe paid).
CHARGE_HOLDS_BALANCE = {
    ChargeStatus.PENDING: True,
    ChargeStatus.SUCCEEDED: True,
    ChargeStatus.REFUSED: False,
}
# A money rule: processor statuses only move forward (though a bank may fail a "succeeded").
P = ProcessorStatus
PROCESSOR_RANK = {
    P.UNKNOWN: 0,
    P.PENDING: 1,
    P.REQUIRES_ACTION: 1,
    P.SUCCEEDED: 2,
    P.FAILED: 3,
    P.CANCELED: 3,
}


def processor_behind(status: ProcessorStatus) -> list[ProcessorStatus]:
    """The statuses a row may move from to `status`: the one forward-only rule (PROCESSOR_RANK)."""
    return [s for s, rank in PROCESSOR_RANK.items() if rank <= PROCESSOR_RANK[status]]


# A money rule: an accepted refund then failed or canceled no longer holds the order's balance.
PROCESSOR_GAVE_BACK = frozenset({P.FAILED, P.CANCELED})
# An accepted refund not finished: on its way to the customer's bank, not "Refunded".
PROCESSOR_ON_ITS_WAY = frozenset({P.PENDING, P.REQUIRES_ACTION})
# The outbox's statements were written for these; a new one needs its claim thought through.
EMAIL_KNOWN = frozenset(
    {OutboxStatus.PENDING, OutboxStatus.SENDING, OutboxStatus.SENT, OutboxStatus.FAILED}
)
DECISION_KNOWN = frozenset(
    {
        DecisionAnswer.APPROVE,
        DecisionAnswer.REJECT,
        DecisionAnswer.ASK,
        DecisionAnswer.REPLY,
        DecisionAnswer.NO_REPLY,
        DecisionAnswer.RECEIVED,
        DecisionAnswer.FLAGGED,
        DecisionAnswer.NO_RETURN,
        DecisionAnswer.CREDIT,
        DecisionAnswer.MONEY,
    }
)
