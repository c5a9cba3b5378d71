"""The collaborators the graph's nodes call, bound to one lease: each write under its fence."""

from __future__ import annotations

from functools import partial

from django.conf import settings

from refunds import lease as leases
from refunds import mail, money, policy
from refunds.carriers import tracker
from refunds.flow.state import Collaborators, CreditRule, Part, ReturnRule
from refunds.models import Order, TicketOrder
from refunds.payments import get_gateway
from refunds.services import credit


def collaborators(lease: leases.Lease) -> Collaborators:
    def find_order(number: str):
        order = Order.objects.filter(number=number).first()
        return order.facts(for_ticket=lease.row_id) if order else None

    return Collaborators(
        find_order=find_order,
        pay=partial(_pay, gateway=get_gateway(), lease=lease),
        send_mail=partial(_send_mail, lease=lease),
        agent_limit_cents=policy.agent_limit_cents(),
        charge_retry_seconds=settings.REFUNDS_CHARGE_RETRY_SECONDS,
        track=tracker(),
        ask_default_outcome="close" if settings.REFUNDS_ASK_DEFAULT_OUTCOME == "close" else "queue",
        return_rule=ReturnRule(
            reasons=frozenset(settings.REFUNDS_RETURN_REASONS),
            from_cents=settings.REFUNDS_RETURN_FROM_CENTS,
            after_recent_refunds=settings.REFUNDS_RETURN_AFTER_REFUNDS,
        ),
        return_address=settings.REFUNDS_RETURN_ADDRESS,
        return_days=round(settings.REFUNDS_RETURN_GIVE_UP_DAYS),
        return_default_outcome=(
            "queue" if settings.REFUNDS_RETURN_DEFAULT_OUTCOME == "queue" else "reject"
        ),
        store_credit=CreditRule(
            bonus_percent=settings.REFUNDS_CREDIT_BONUS_PERCENT,
            only_reasons=frozenset(settings.REFUNDS_CREDIT_ONLY_REASONS),
        )
        if settings.REFUNDS_STORE_CREDIT
        else None,
        credit=partial(_credit, lease=lease) if settings.REFUNDS_STORE_CREDIT else None,
        credit_days=round(settings.REFUNDS_CREDIT_CHOOSE_DAYS),
    )


def _send_mail(*, lease: leases.Lease, key: str, kind: str, facts: dict, **rest) -> None:
    """mail.send_worded, with the offer's link added to an offer of store credit."""
    if kind == "credit_offer":
        facts = facts | credit.facts_for(key)
    mail.send_worded(ticket_id=lease.row_id, lease=lease, key=key, kind=kind, facts=facts, **rest)


def _credit(
    *,
    lease: leases.Lease,
    key: str,
    amount_cents: int,
    bonus_cents: int,
    order_number: str,
    parts: list[Part],
) -> str:
    """Store credit through the money ledger: the same balance, lock, key and fence as money."""
    gateway = credit.StoreCreditGateway(get_gateway(), bonus_cents)
    return _pay(
        gateway=gateway,
        lease=lease,
        key=key,
        amount_cents=amount_cents,
        order_number=order_number,
        parts=parts,
    )


def _pay(
    *,
    gateway,
    lease: leases.Lease,
    key: str,
    amount_cents: int,
    order_number: str = "",
    parts: list[Part] | None = None,
    dispute_seen: bool = False,
) -> str:
    """money.pay for one of the ticket's orders: its first, or the one a charge_order names."""
    order_id = lease.order_id
    if order_number and order_number != lease.order_number:
        found = (
            TicketOrder.objects.filter(ticket_id=lease.row_id, order__number=order_number)
            .values_list("order_id", flat=True)
            .first()
        )
        if found is None:
            raise ValueError(f"ticket {lease.row_id} covers no order {order_number}")
        order_id = found
    return money.pay(
        gateway=gateway,
        ticket_id=lease.row_id,
        order_id=order_id,
        lease=lease,
        key=key,
        amount_cents=amount_cents,
        parts=parts,
        dispute_seen=dispute_seen,
    )
