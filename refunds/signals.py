from django.db.models.signals import post_migrate
from django.dispatch import receiver


@receiver(post_migrate)
def create_checkpoint_tables(sender, using="default", **kwargs) -> None:
    # Checkpoint and store tables are created once, at deploy, beside the app's migrations:
    # workers starting together on an empty schema would race each other's setup().
    if sender.name != "refunds":
        return
    from refunds import persistence

    persistence.setup_persistence()
