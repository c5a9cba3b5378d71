from django.db.models.signals import post_migrate
from django.dispatch import Signal, receiver

# A thread reached a point of its run ("resume", "after:<node>", "hand_back:state_written"); a
# receiver's exception stops the run there: the crash tests' kill points.
step_reached = Signal()


def emit_step(thread_id: str, event: str) -> None:
    step_reached.send(sender=None, thread_id=thread_id, event=event)


# A step of one email's conversation with the mail server (connect, handing_over, handed_over,
# accepted, recorded): the crash tests' kill points inside the one window of mail once.
mail_delivery = Signal()


@receiver(post_migrate)
def create_checkpoint_tables(sender, using="default", **kwargs) -> None:
    # Once, at deploy: workers starting together on an empty schema would race setup().
    if sender.name != "refunds":
        return
    from refunds import persistence

    persistence.setup_persistence()
