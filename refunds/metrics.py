"""Counted as things happen; what the database knows is read at scrape time (insights/)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

ADVANCES = Counter(
    "refund_desk_advances_total",
    "Runs of runner.advance(), by how they ended (a status, busy, error, lease lost, ...).",
    ["outcome"],
)
ADVANCE_SECONDS = Histogram(
    "refund_desk_advance_duration_seconds",
    "How long one runner.advance() took.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
DECISION_TO_REFUNDED_SECONDS = Histogram(
    "refund_desk_decision_to_refunded_seconds",
    "From a reviewer's approval to the ticket's mirror saying refunded.",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600),
)
FAILURES = Counter(
    "refund_desk_ticket_failures_total",
    "Tickets marked failed after running out of attempts (admins retry them).",
)
SWEEP_REENQUEUED = Counter(
    "refund_desk_sweep_reenqueued_total",
    "Wake-ups the recovery sweep sent for tickets no worker held.",
)
MAIL_FAILURES = Counter(
    "refund_desk_mail_failures_total",
    "SMTP attempts that failed, by kind (retryable or refused).",
    ["kind"],
)
WEBHOOK_FAILURES = Counter(
    "refund_desk_webhook_failures_total",
    "Webhook POSTs that did not get a 2xx (each is retried with backoff).",
)
INBOUND_REFUSED = Counter(
    "refund_desk_inbound_refused_total",
    "Posts to the mail provider's webhooks refused, by why (too_large, signature, stale, "
    "replayed, malformed).",
    ["reason"],
)
STRIPE_EVENTS_REFUSED = Counter(
    "refund_desk_stripe_events_refused_total",
    "Posts to Stripe's webhook refused, by why (not_configured, too_large, signature, malformed).",
    ["reason"],
)
RECONCILE_PROBLEMS = Counter(
    "refund_desk_reconcile_problems_total",
    "Differences `reconcile` found between the ledger and the processor (refunds missing on "
    "either side, amounts that differ, orders refunded past what was paid).",
)
