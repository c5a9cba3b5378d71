from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    """Tools for tests and `manage.py crashtest`; crash points only with REFUNDS_CRASH_PLAN."""

    name = "devtools"
    label = "refunds_devtools"

    def ready(self) -> None:
        from django.conf import settings

        if settings.REFUNDS_CRASH_PLAN:
            from devtools import faults

            # The hooks are wired here, not in config/settings.py, so the settings production
            # reads name nothing of devtools: the app's own seams point at the crash points.
            settings.REFUNDS_CRASH_INNER = {"gateway": settings.REFUNDS_GATEWAY}
            settings.REFUNDS_GATEWAY = "devtools.faults.CrashingGateway"
            settings.REFUNDS_NODE_WRAPPER = "devtools.faults.wrap_node"
            settings.WORKFLOW_TASK_WRAPPER = "devtools.faults.wrap_task"
            faults.install()
