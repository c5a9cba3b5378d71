from celery import shared_task

from webhooks import delivery


@shared_task(ignore_result=True)
def deliver_webhooks() -> dict[str, int]:
    """Overlapping sweeps are safe: each delivery is claimed before it is sent."""
    return delivery.deliver_due()
