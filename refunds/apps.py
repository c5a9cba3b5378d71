from django.apps import AppConfig


class RefundsConfig(AppConfig):
    name = "refunds"
    verbose_name = "Refunds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from refunds import checks, mail_tracking, signals  # noqa: F401
        from refunds.outbox import also_sent_by
        from refunds.services import also_recover, asking, returns, stripe_events_recover, timers

        also_sent_by(timers.REMINDERS)
        also_sent_by(asking.QUESTION_REMINDERS)
        also_recover(stripe_events_recover)
        also_recover(asking.replies_kept_apply)
        also_sent_by(returns.RETURN_REMINDERS)
        also_recover(returns.returns_kept_apply)
