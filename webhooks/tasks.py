from celery import shared_task

from webhooks import delivery


@shared_task(ignore_result=True)
def deliver_webhooks() -> dict[str, int]:
    """Beat runs this every WEBHOOK_SWEEP_SECONDS; a sweep still queued when the next is due
    expires. Overlapping sweeps are safe: each delivery is claimed before it is sent."""
    return delivery.deliver_due()
