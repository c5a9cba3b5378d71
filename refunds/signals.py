from django.db.models.signals import post_migrate
from django.dispatch import Signal, receiver

# A point of a run ("resume", "after:<node>", ...); a receiver that raises stops it there.
step_reached = Signal()


def emit_step(thread_id: str, event: str) -> None:
    step_reached.send(sender=None, thread_id=thread_id, event=event)


# A step of one email's SMTP conversation: the kill points inside mail once's one window.
mail_delivery = Signal()


@receiver(post_migrate)
def create_checkpoint_tables(sender, using="default", **kwargs) -> None:
    # Once, at deploy: workers starting together on an empty schema would race setup().
    if sender.name != "refunds":
        return
    from refunds import persistence

    persistence.setup_persistence()
