import os

from django.conf import settings


def test_tests_keep_their_data_apart_from_the_app():
    folder = settings.DATA_DIR
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # one of bin/test's pytest processes: a folder of its own inside var/test*
        assert folder.name == worker, folder
        folder = folder.parent
    assert folder.name.startswith("test"), settings.DATA_DIR
