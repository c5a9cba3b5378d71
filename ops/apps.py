from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "ops"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ops.erasure import erasures_recover
        from refunds.services import also_recover

        also_recover(erasures_recover)
