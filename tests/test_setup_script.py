"""bin/setup says what it does in words and keeps pip's output in var/setup.log, shown when it
fails (a first `bin/run` used to show nothing but pip warnings for minutes)."""

import shutil
import subprocess
import sys

from devtools.processes import ROOT


def test_a_failed_install_says_so_and_shows_the_end_of_its_log(tmp_path):
    (tmp_path / "bin").mkdir()
    shutil.copy(ROOT / "bin" / "setup", tmp_path / "bin" / "setup")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0"\n')
    (tmp_path / "requirements.lock").write_text("this is not a requirement ===\n")

    done = subprocess.run(
        ["bash", "bin/setup"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 1
    assert done.stdout.startswith("Installing Refund Desk's packages into .venv")
    assert "Installing failed. The last lines of var/setup.log:" in done.stderr
    assert "requirements.lock" in done.stderr  # pip's own words about what it could not read
    assert (tmp_path / "var" / "setup.log").exists()
    assert not (tmp_path / ".venv" / ".installed").exists()


def test_an_installation_that_is_current_says_nothing():
    done = subprocess.run(
        ["bash", "bin/setup", "--test"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0
    assert done.stdout == "" and done.stderr == ""
