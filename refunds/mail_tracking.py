"""anymail's tracking events on the outbox row. One for a message we never sent is answered 200:
the provider would only retry it forever."""

from __future__ import annotations

import logging

from anymail.signals import AnymailTrackingEvent, EventType, tracking
from django.db.models import Q
from django.dispatch import receiver
from django.utils import timezone

from refunds.models import Email

log = logging.getLogger(__name__)

METADATA_KEY = "refund_key"  # the outbox key, sent with every message as anymail metadata

# anymail's event types we keep; opens, clicks and deferrals change nothing on the row.
_KEPT = {
    EventType.DELIVERED: Email.Delivery.DELIVERED,
    EventType.BOUNCED: Email.Delivery.BOUNCED,
    EventType.COMPLAINED: Email.Delivery.COMPLAINED,
    EventType.REJECTED: Email.Delivery.FAILED,
    EventType.FAILED: Email.Delivery.FAILED,
}


@receiver(tracking, dispatch_uid="refunds.mail_tracking.record_delivery")
def record_delivery(sender, event: AnymailTrackingEvent, esp_name: str, **kwargs) -> None:
    delivery = _KEPT.get(event.event_type)
    if delivery is None:
        return
    key = (event.metadata or {}).get(METADATA_KEY) or ""
    found = Q(key=key) if key else Q(provider_message_id=event.message_id or "-")
    at = event.timestamp or timezone.now()
    detail = event.description or event.mta_response or event.reject_reason or ""
    # Providers send events out of order and again: an older event never overwrites a newer one.
    changed = (
        Email.objects.filter(found)
        .filter(Q(delivery_at__isnull=True) | Q(delivery_at__lte=at))
        .update(delivery=delivery, delivery_detail=str(detail)[:500], delivery_at=at)
    )
    if not changed and not Email.objects.filter(found).exists():
        log.warning(
            "mail tracking: %s reported %s for a message the outbox does not know (key %r, id %r)",
            esp_name,
            event.event_type,
            key,
            event.message_id,
        )
