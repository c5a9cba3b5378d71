"""Handing back a refund the processor failed after accepting it (runner.py, under the lease)."""

from __future__ import annotations

import logging
from typing import Any, cast

from django.db import transaction
from django.utils import timezone

from refunds import audit, selectors, signals
from refunds import lease as leases
from refunds.flow.errors import MailRefused
from refunds.flow.nodes.checks import customer_words, reproposed
from refunds.flow.nodes.common import reason_of
from refunds.flow.nodes.messages import language_of, refund_failed_facts, refund_failed_key
from refunds.flow.state import Collaborators, RefundState
from refunds.flow.words import dollars
from refunds.models import AuditEvent, Charge
from refunds.persistence import graph, snapshot, thread_config

log = logging.getLogger(__name__)


def hand_back_failed_refunds(lease: leases.Lease, ctx: Collaborators) -> None:
    """The customer is told once; the review comes back without the refund, under a new key."""
    failed = Charge.objects.failed_not_handed_back().filter(ticket_id=lease.row_id)
    for charge in failed.select_related("order").order_by("pk"):
        values = cast(RefundState, snapshot(lease.thread_id).values or {})
        number = charge.order.number
        charges = values.get("charges") or {}
        why = selectors.refund_failure_words(charge.failure_reason, charge.processor_status)
        # Else a crash came after update_state, and only the mark below is left.
        if charge.receipt and charges.get(number, {}).get("receipt") == charge.receipt:
            check = values["checks"][number]
            try:
                ctx.send_mail(
                    key=refund_failed_key(lease.thread_id, charge.receipt),
                    to=check["order"]["customer_email"],
                    kind="refund_failed",
                    facts=refund_failed_facts(check["order"], charge.amount_cents),
                    language=language_of(values),
                )
            except MailRefused as exc:  # a bad address: the manager's review still comes
                log.warning("ticket %s: failure email refused: %s", lease.row_id, exc)
            left = {n: c for n, c in charges.items() if n != number and c.get("receipt")}
            update: dict[str, Any] = {
                "checks": {
                    number: {
                        # The order as it stands now, not as checked before this refund.
                        **reproposed(
                            check,
                            ctx.find_order(number) or check["order"],
                            reason_of(values),
                            customer_words(values),
                        ),
                        "refunds_failed": check.get("refunds_failed", 0) + 1,
                    }
                },
                "charges": {number: {"number": number, "amount_cents": 0}},
                "amount_cents": sum(c["amount_cents"] for c in left.values()),
                "receipt": ", ".join(c["receipt"] for c in left.values()),
                "payment_error": why.removesuffix(" No money reached them.").rstrip("."),
                "required_role": "manager",
                # The ended run's "Refunded $X." is no longer true; the next ending says anew.
                "outcome_reason": "",
                # Why it failed is the review's own line (and the audit's note): said once there.
                "notes": [
                    f"Order {number}: refund {charge.receipt} of {dollars(charge.amount_cents)} "
                    "failed at Stripe; the money came back."
                ],
                "trail": ["refund_failed"],
            }
            config = thread_config(lease.thread_id, fence=lease.epoch)
            graph().update_state(config, update, as_node="received")
            # A worker that dies here: the next finds the receipt gone and only marks it.
            signals.emit_step(lease.thread_id, "hand_back:state_written")
        with transaction.atomic():
            marked = Charge.objects.filter(
                pk=charge.pk, handed_back_at__isnull=True, ticket__lease_epoch=lease.epoch
            ).update(handed_back_at=timezone.now())
            if marked:
                audit.record(lease.row_id, AuditEvent.Action.REFUND_FAILED, note=why)
