"""The house style is checked, not hoped for: ruff's lint and format over the whole tree."""

import subprocess
import sys

from devtools.processes import ROOT


def test_the_code_passes_ruff_check():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout


def test_the_code_is_ruff_formatted():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout
