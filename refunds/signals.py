from django.db.models.signals import post_migrate
from django.dispatch import Signal, receiver

# A thread reached a point of its run: `event` is "resume" before a resume is applied,
# "after:<node>" once that node's checkpoint is on disk, or "hand_back:state_written" once a
# failed refund's state update is on disk and before its charge is marked handed back. Sent
# with `thread_id` and `event`; a receiver's exception stops the run where it stands (crash
# tests connect here, from devtools/).
step_reached = Signal()


def emit_step(thread_id: str, event: str) -> None:
    step_reached.send(sender=None, thread_id=thread_id, event=event)


# A step of one email's conversation with the mail server, sent with `key` (the outbox row's)
# and `event`: "connect" before the conversation, "handing_over" once the handover mark
# committed (the final "." about to go), "handed_over" once the "." went to the server,
# "accepted" once the server's 250 arrived (not yet recorded), "recorded" once the sent mark
# committed. Metrics and the crash tests' kill points connect here.
mail_delivery = Signal()


@receiver(post_migrate)
def create_checkpoint_tables(sender, using="default", **kwargs) -> None:
    # Checkpoint and store tables are created once, at deploy, beside the app's migrations:
    # workers starting together on an empty schema would race each other's setup().
    if sender.name != "refunds":
        return
    from refunds import persistence

    persistence.setup_persistence()
