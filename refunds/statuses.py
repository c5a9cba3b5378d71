"""The statuses of tickets, charges and emails and the answers of decisions, with what each
status means for the hand-written SQL (refunds/queries.py) and the ORM (refunds/models/): one
home, imported by both, so neither imports the other for them. Each set is a decision about every
status of its kind; tests/test_queries.py fails when a status is added until it is placed."""

from __future__ import annotations

from django.db import models


class TicketStatus(models.TextChoices):
    NEW = "new", "New"
    RUNNING = "running", "Running"
    AWAITING_REVIEW = "awaiting_review", "Awaiting review"
    AWAITING_CUSTOMER = "awaiting_customer", "Waiting on the customer"
    # The wait on the customer ended without a reply and REFUNDS_ASK_DEFAULT_OUTCOME is "close":
    # the thread waits on an interrupt still, so a reply reopens it (not final, not in a queue).
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
    """What the payment processor last said about a refund it accepted (Stripe's Refund.status,
    re-read from Stripe on each of its events). "" is not known: a gateway without events, or a
    refund made before the desk listened to them; the desk shows it as "Refunded", as before."""

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
    """What the mail provider's tracking webhook last said about a message it took (anymail's
    event types we keep; "" until it says anything, and always with plain SMTP)."""

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


S = TicketStatus
# Every ticket status, and whether a worker may take the thread's lease: not once it is final,
# nor when it failed (an admin's retry puts it back).
TICKET_LEASABLE = {
    S.NEW: True,
    S.RUNNING: True,
    S.AWAITING_REVIEW: True,
    S.AWAITING_CUSTOMER: True,
    S.CLOSED: True,  # a reply reopens it: the runner resumes its wait under the lease
    S.REFUNDED: False,
    S.DECLINED: False,
    S.REJECTED: False,
    S.FAILED: False,
}
# Work left for a worker with no person's answer needed: a ticket never run, or one whose run
# stopped (a crash, a lost lease). A review waits on a person; the rest are done.
TICKET_WORK_LEFT = {
    S.NEW: True,
    S.RUNNING: True,
    S.AWAITING_REVIEW: False,
    S.AWAITING_CUSTOMER: False,
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
# Where a refund's processor status may go from each one, whatever order its events arrive in
# and however old the answer a handler read: on its way, then settled, and Stripe may still fail
# a refund it called succeeded (the bank sends it back); nothing goes back to "on its way".
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
    """The statuses a row may move from to `status`: those not ahead of it (PROCESSOR_RANK).
    The one forward-only rule, for the ledger's refunds and those made outside the desk."""
    return [s for s, rank in PROCESSOR_RANK.items() if rank <= PROCESSOR_RANK[status]]


# A refund the processor accepted and then failed or canceled: its money came back to the
# merchant, so it no longer holds the order's balance (refunds/money.py), and the ticket goes
# back to a manager (refunds/hand_back.py).
PROCESSOR_GAVE_BACK = frozenset({P.FAILED, P.CANCELED})
# A refund the processor accepted and has not finished: started, on its way to the customer's
# bank (the desk says so, not "Refunded": refunds/selectors.py refund_progress).
PROCESSOR_ON_ITS_WAY = frozenset({P.PENDING, P.REQUIRES_ACTION})
# The outbox's statements (refunds/outbox.py) were written for these; a new one needs its claim
# and its marks thought through. FAILED is a webhook's, whose rows they never touch.
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
    }
)
