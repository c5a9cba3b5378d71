from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    """Installed only when REFUNDS_CRASH_PLAN is set (tests, crashtest): hooks in crash points."""

    name = "refunds.devtools"
    label = "refunds_devtools"

    def ready(self) -> None:
        from refunds.devtools import faults

        faults.install()
