from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    """Tools for tests and `manage.py crashtest`; crash points only with REFUNDS_CRASH_PLAN."""

    name = "devtools"
    label = "refunds_devtools"

    def ready(self) -> None:
        from django.conf import settings

        if settings.REFUNDS_CRASH_PLAN:
            from devtools import faults

            faults.install()
