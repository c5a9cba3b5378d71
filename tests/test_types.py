"""The types are checked, not hoped for: mypy with the django-stubs and DRF plugins over the app
and devtools ([tool.mypy] in pyproject.toml), at zero errors. Its cache lives in var/mypy, so a
run after the first checks only what changed."""

import os
import re
import subprocess

from devtools.processes import ROOT


def by_hand() -> str:
    """The mypy command README.md gives, which docs/development.md and pyproject.toml repeat."""
    found = re.search(r"`([^`]*\.venv/bin/mypy)`", (ROOT / "README.md").read_text())
    assert found, "README.md no longer says how to run mypy by hand"
    for page in ("docs/development.md", "pyproject.toml"):
        assert found.group(1) in (ROOT / page).read_text(), page
    return found.group(1)


def test_the_code_passes_mypy_run_by_hand_as_the_readme_says():
    # A clean shell, as a newcomer's: nothing from this test run's environment (its key, its
    # fakes allowed) may be what lets the plugin load the settings.
    done = subprocess.run(
        ["bash", "-c", by_hand()],
        cwd=ROOT,
        env={"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
