from django.apps import AppConfig


class IntakeConfig(AppConfig):
    name = "intake"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from intake import checks, inbound, outbox, services  # noqa: F401 - checks, inbound connect
        from refunds.mail import CUSTOMER_MESSAGE_IDS
        from refunds.outbox import also_sent_by
        from refunds.services import also_recover

        also_recover(services.messages_recover)
        also_sent_by(outbox.ACKNOWLEDGMENTS)
        if outbox.customer_message_ids not in CUSTOMER_MESSAGE_IDS:
            CUSTOMER_MESSAGE_IDS.append(outbox.customer_message_ids)
