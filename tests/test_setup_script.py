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
    assert done.stdout.startswith("Installing Refund Desk into .venv: 1 packages")
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


FAKE_PYTHON = """#!/bin/bash
# `python -m venv .venv` makes a .venv whose python is a pip that fetches slowly.
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
for n in $(seq 1 10); do echo "Collecting package$n==1.0"; sleep 0.4; done
echo "Installing collected packages: package1"
sleep 1.5
echo "Successfully installed package1"
"""


def test_a_first_install_says_how_far_it_has_got(tmp_path):
    """The first `bin/run` took 320 s with one line, "the first time takes a minute or two",
    during 225 s of installing: it now says how many packages of how many were fetched."""
    (tmp_path / "bin").mkdir()
    shutil.copy(ROOT / "bin" / "setup", tmp_path / "bin" / "setup")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0"\n')
    pins = "".join(f"package{n}==1.0\n" for n in range(1, 11))
    (tmp_path / "requirements.lock").write_text("# pinned\n" + pins)
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)

    done = subprocess.run(
        ["bash", "bin/setup"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(python)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said[0] == (
        "Installing Refund Desk into .venv: 10 packages (the first time takes a few minutes)..."
    )
    fetched = [int(line.split()[1]) for line in said if line.startswith("  fetched ")]
    assert len(fetched) >= 2 and fetched == sorted(set(fetched)), said
    assert all(line.endswith("of 10 packages") for line in said if "fetched " in line[:10])
    assert said[-2:] == [
        "  all fetched; unpacking them into .venv (the longest part)...",
        "Installed.",
    ]
