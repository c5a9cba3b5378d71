"""Store credit as the customer's choice: the offer's row and its links, the choice recorded once
as the wait's Decision, the timer's "money", and the credit ledger behind the money ledger's
guards (a Charge per key takes the order's balance; StoreCredit is what the customer holds)."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Literal

import httpx
from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from core.network import outside_transaction
from refunds import audit, enqueue
from refunds.flow.errors import RetryableGatewayError
from refunds.flow.nodes.credit import credit_key
from refunds.flow.state import OrderAnswer, Part
from refunds.models import AuditEvent, Charge, CreditOffer, Decision, StoreCredit, Ticket
from refunds.payments import Gateway, ProcessorDispute, ProcessorRefund
from refunds.services.errors import RefundError

log = logging.getLogger(__name__)

Choice = Literal["credit", "money"]
_SALT = "refund-desk.credit-offer"


def offer_open(*, ticket: Ticket, decision: Decision, answers: dict[str, OrderAnswer]) -> None:
    """In the transaction that records an approval: its offer, when it offers store credit."""
    if any(one.get("offer_credit") for one in answers.values()):
        CreditOffer.objects.create(
            ticket=ticket,
            decision=decision,
            token=secrets.token_hex(16),  # 128 bits, lower case: mail systems may fold the case
            email_key=credit_key(ticket.thread_id, decision.pk),
        )


def link(offer: CreditOffer) -> str:
    """The offer's page for the customer: signed, so no one else's offer can be named."""
    signed = signing.dumps(offer.pk, salt=_SALT)
    return settings.REFUNDS_PUBLIC_URL.rstrip("/") + reverse("credit_choose", args=[signed])


def offer_of_link(signed: str) -> CreditOffer:
    max_age = timedelta(days=settings.REFUNDS_CREDIT_CHOOSE_DAYS + 30)
    try:
        pk = signing.loads(signed, salt=_SALT, max_age=max_age)
    except signing.BadSignature:
        raise RefundError("This link is not valid (or it is too old).") from None
    offer = CreditOffer.objects.filter(pk=pk).select_related("ticket__order").first()
    if offer is None:
        raise RefundError("This offer no longer exists.")
    return offer


def facts_for(key: str) -> dict[str, str]:
    """What the mailer adds to the offer email: the link to choose by."""
    offer = CreditOffer.objects.filter(email_key=key).first()
    return {"choose_url": link(offer)} if offer is not None else {}


def offer_for(recipients: Iterable[str]) -> CreditOffer | None:
    """The offer a reply answers, by the token of its reply address; None when none."""
    from refunds.services.asking import token_in

    token = token_in(recipients)
    if token is None:
        return None
    return CreditOffer.objects.filter(token=token).select_related("ticket__order").first()


# A reply that says one of these words, and not one of the other's, chooses.
_WORDS: dict[Choice, tuple[str, ...]] = {
    "credit": ("credit", "crédito", "credito", "gutschrift", "guthaben", "avoir"),
    "money": (
        "refund",
        "money",
        "reembolso",
        "rückerstattung",
        "erstattung",
        "geld",
        "remboursement",
        "rimborso",
        "dinheiro",
        "dinero",
        "argent",
        "soldi",
    ),
}


def choice_read(text: str) -> Choice | None:
    """The choice a reply's first line makes; None when it says neither or both."""
    first = next((line for line in text.splitlines() if line.strip()), "").lower()
    said = set(re.findall(r"\w+", first))
    found = [choice for choice, words in _WORDS.items() if said & set(words)]
    return found[0] if len(found) == 1 else None


def credit_choose(*, offer: CreditOffer, choice: str, source: str, seen: dict | None = None) -> str:
    """Record the customer's choice as the wait's answer; RefundError says why not. Of two at
    once (a click and a reply) one wins: the CAS on `chosen_at`, the UNIQUE interrupt id."""
    if choice not in ("credit", "money"):
        raise RefundError("Choose store credit or money.")
    if offer.chosen_at is not None:
        raise RefundError("You have chosen already; thank you.")
    try:
        with transaction.atomic():
            _record(offer, choice, (seen or {}) | {"source": source}, timezone.now())
    except _NotRecorded as exc:
        raise RefundError(str(exc)) from None
    return choice


class _NotRecorded(Exception):
    pass


def _record(offer: CreditOffer, choice: str, seen: dict, now) -> Decision:
    row = (
        Ticket.objects.filter(pk=offer.ticket_id, status=Ticket.Status.AWAITING_CUSTOMER)
        .values("pending_interrupt_id", "pending_payload")
        .first()
    )
    payload = row["pending_payload"] if row and isinstance(row["pending_payload"], dict) else {}
    if row is None or payload.get("offer_id") != offer.decision_id:
        raise _NotRecorded(
            "Your refund is not waiting for this choice now: it is being prepared (try again "
            "in a minute) or it was settled already."
        )
    if not CreditOffer.objects.filter(pk=offer.pk, chosen_at=None).update(chosen_at=now):
        raise _NotRecorded("You have chosen already; thank you.")
    try:
        with transaction.atomic():
            decision = Decision.objects.create(
                ticket_id=offer.ticket_id,
                interrupt_id=row["pending_interrupt_id"],
                answer=choice,
                reason="" if seen.get("source") != "timer" else _NO_CHOICE,
            )
    except IntegrityError:
        raise _NotRecorded("You have chosen already; thank you.") from None
    CreditOffer.objects.filter(pk=offer.pk).update(choice=decision)
    audit.record(
        offer.ticket_id,
        AuditEvent.Action.REPLY,
        seen=seen | {"interrupt_id": row["pending_interrupt_id"], "offer": offer.pk},
        answer={"resumed": True, "chose": choice},
    )
    enqueue.advance_on_commit(offer.ticket_id)
    return decision


_NO_CHOICE = "No choice by the deadline: money, as the offer said."


def offers_wait_timers(*, now=None) -> list[int]:
    """The choice's timer: an offer not chosen by REFUNDS_CREDIT_CHOOSE_DAYS is paid in money."""
    now = now or timezone.now()
    due = CreditOffer.objects.filter(
        chosen_at=None,
        ticket__status=Ticket.Status.AWAITING_CUSTOMER,
        offered_at__lte=now - timedelta(days=settings.REFUNDS_CREDIT_CHOOSE_DAYS),
    )
    ended = []
    for offer in due:
        try:
            with transaction.atomic():
                _record(offer, "money", {"source": "timer"}, now)
        except _NotRecorded as exc:
            log.info("offer %s: no give-up: %s", offer.pk, exc)
        else:
            ended.append(offer.ticket_id)
    return ended


class StoreCreditGateway:
    """The money ledger's gateway for store credit: `charge` issues it in the credit ledger once
    per key (and hands it to the shop where an order source is configured); the payment's
    refunds and disputes are still read from the processor, so credit never passes what was
    paid less what was refunded elsewhere."""

    def __init__(self, processor: Gateway, bonus_cents: int) -> None:
        self.processor = processor
        self.bonus_cents = bonus_cents

    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
        parts: Sequence[Part] = (),
    ) -> str:
        charge = Charge.objects.select_related("order").get(idempotency_key=idempotency_key)
        credit, _ = StoreCredit.objects.get_or_create(
            key=idempotency_key,
            defaults={
                "ticket_id": charge.ticket_id,
                "order": charge.order,
                "customer_email": charge.order.customer_email,
                "amount_cents": amount_cents,
                "bonus_cents": self.bonus_cents,
                "currency": charge.order.currency,
            },
        )
        if credit.issued_at is None:
            reference = _hand_to_shop(credit)
            StoreCredit.objects.filter(pk=credit.pk, issued_at=None).update(
                issued_at=timezone.now(), shop_reference=reference
            )
        return credit.receipt

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
        issued = StoreCredit.objects.filter(key=idempotency_key, issued_at__isnull=False).first()
        return issued.receipt if issued else None

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        return self.processor.payment_refunds(payment_reference)

    def payment_disputes(self, payment_reference: str) -> list[ProcessorDispute]:
        return self.processor.payment_disputes(payment_reference)


def _hand_to_shop(credit: StoreCredit) -> str:
    """POST the credit to the order source's /store-credits (keyed, so a retry is one credit);
    "" where none is configured. A shop that does not take it: retried, then a manager hears."""
    if not settings.REFUNDS_ORDER_SOURCE:
        return ""
    outside_transaction("the shop's order source")
    headers = {"Idempotency-Key": credit.key, "Accept": "application/json"}
    if settings.REFUNDS_ORDER_SOURCE_TOKEN:
        headers["Authorization"] = f"Bearer {settings.REFUNDS_ORDER_SOURCE_TOKEN}"
    body = {
        "order": credit.order.number,
        "customer_email": credit.customer_email,
        "amount_cents": credit.amount_cents + credit.bonus_cents,
        "currency": credit.currency,
        "reference": credit.key,
    }
    url = f"{settings.REFUNDS_ORDER_SOURCE.rstrip('/')}/store-credits"
    try:
        response = httpx.post(
            url, json=body, headers=headers, timeout=settings.REFUNDS_ORDER_SOURCE_TIMEOUT
        )
    except httpx.HTTPError as exc:
        raise RetryableGatewayError(f"the shop did not take the store credit ({exc})") from None
    if response.status_code >= 300:
        raise RetryableGatewayError(
            f"the shop did not take the store credit (it answered {response.status_code})"
        )
    try:
        return str(response.json().get("id") or "")[:200]
    except ValueError:
        return ""
