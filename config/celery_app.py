import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("refund_desk")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
REDBEAT_KEYS = ("redbeat_redis_url", "redbeat_redis_options", "redbeat_key_prefix")


@app.on_after_configure.connect
def name_redbeat_settings(sender: Celery, **_kwargs) -> None:
    """RedBeat reads its keys by their bare names, which Celery's CELERY_ namespace hides."""
    sender.conf.update({key: sender.conf.get(key) for key in REDBEAT_KEYS})


@task_prerun.connect
@task_postrun.connect
def recycle_connections(**_kwargs) -> None:
    """Around every task, what Django does around every request (CELERY_DB_REUSE_MAX)."""
    from django.db import close_old_connections

    close_old_connections()
