"""The types are checked, not hoped for: mypy with the django-stubs and DRF plugins over the app
and devtools ([tool.mypy] in pyproject.toml), at zero errors. Its cache lives in var/mypy, so a
run after the first checks only what changed."""

import subprocess
import sys

from devtools.processes import ROOT


def test_the_code_passes_mypy():
    done = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
