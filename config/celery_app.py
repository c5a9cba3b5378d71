import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("refund_desk")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def recycle_connections(**_kwargs) -> None:
    """Around every task, what Django does around every request: drop a connection that is too
    old (CONN_MAX_AGE) or broken, and health-check a kept one before its first query. Celery's
    own forced close is off (CELERY_DB_REUSE_MAX in config/settings.py)."""
    from django.db import close_old_connections

    close_old_connections()
