"""The settings tables of docs/operations.md stay true to config/settings.py: every environment
variable the settings read is in a table, with its default, so an operator never meets one only
in the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# config/env.py's readers, each taking the variable's name first: environs' (`env.int(...)`) and
# the checks of our own that read.
READERS = {"env_url", "env_list", "env_addresses"}
TABLES_IN = ("## Settings (environment variables)", "## Scale out")


def read_by_settings() -> tuple[set[str], set[str]]:
    """The variables config/settings.py reads by name, and the prefixes it reads every variable
    of (`ANYMAIL_` in `for name in os.environ.items() if name.startswith("ANYMAIL_")`)."""
    tree = ast.parse((ROOT / "config" / "settings.py").read_text(encoding="utf-8"))
    names: set[str] = set()
    prefixes: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = ast.unparse(node.func)
            if called.startswith("env.") or called in READERS | {"os.environ.get", "os.getenv"}:
                names.add(node.args[0].value)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and ast.unparse(node.value) == "os.environ"
            and isinstance(node.slice, ast.Constant)
        ):
            names.add(node.slice.value)
        elif isinstance(node, ast.comprehension) and "os.environ" in ast.unparse(node.iter):
            for test in node.ifs:
                for call in ast.walk(test):
                    if (
                        isinstance(call, ast.Call)
                        and ast.unparse(call.func).endswith(".startswith")
                        and isinstance(call.args[0], ast.Constant)
                    ):
                        prefixes.add(call.args[0].value)
    return names, prefixes


def documented() -> dict[str, str]:
    """Each variable in docs/operations.md's settings tables -> the default its row gives."""
    readme = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    for heading in TABLES_IN:
        section = readme.split(heading, 1)[1].split("\n## ", 1)[0]
        for line in section.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not line.startswith("| `") or len(cells) < 3:
                continue
            for name in re.findall(r"`([A-Z][A-Z0-9_]*(?:<NAME>)?)`", cells[0]):
                rows.setdefault(name, cells[1])
    return rows


def test_the_settings_read_variables_this_test_can_see():
    names, prefixes = read_by_settings()
    # A guard on the reader above: a refactor of config/settings.py that hid every name from it
    # would make the next test pass on nothing.
    assert {"SECRET_KEY", "DATABASE_URL", "STRIPE_SECRET_KEY", "CHECKPOINT_URL"} <= names
    assert len(names) > 60 and prefixes == {"ANYMAIL_"}


def test_every_variable_the_settings_read_is_in_the_readme_with_its_default():
    names, prefixes = read_by_settings()
    rows = documented()
    missing = sorted(names - rows.keys())
    assert missing == [], f"docs/operations.md's settings tables lack {missing}"
    assert all(f"{prefix}<NAME>" in rows for prefix in prefixes), prefixes
    no_default = sorted(name for name in names if not rows[name])
    assert no_default == [], f"docs/operations.md gives no default for {no_default}"
