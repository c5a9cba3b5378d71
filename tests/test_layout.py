"""Dependencies point down (DESIGN.md, Layout): no package or module cycle, core under
everything, the graph code free of Django, devtools used by nothing the app ships."""

import importlib.util
import re
import sys

from devtools.processes import ROOT

sys.path.insert(0, str(ROOT / "bench"))
spec = importlib.util.spec_from_file_location("imports_graph", ROOT / "bench" / "imports.py")
graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(graph)

FOUND = graph.modules(ROOT)
PACKAGES = graph.package_graph(FOUND)
MODULES = graph.module_graph(FOUND)


def test_there_is_no_package_cycle_and_no_module_cycle():
    assert graph.cycles(PACKAGES) == []
    assert graph.cycles(MODULES) == []


def test_core_imports_nothing_of_the_project():
    assert PACKAGES["core"] == set()


def test_nothing_the_app_ships_imports_devtools():
    assert [p for p, targets in PACKAGES.items() if "devtools" in targets] == []


def test_the_refund_graph_imports_no_django():
    flow = {name: path for name, path in FOUND.items() if name.startswith("refunds.flow")}
    assert flow
    for name, path in flow.items():
        assert not any(t.split(".")[0] == "django" for t in graph.imported(path)), name


def test_services_never_import_tasks():
    services = [name for name in FOUND if name.startswith("refunds.services")]
    assert services and all("refunds.tasks" not in MODULES[name] for name in services)


PRIVATE_LANGGRAPH = re.compile(
    r"__pregel_\w+|__return__|langgraph(\.\w+)*\._\w+|from langgraph[\w.]* import \(?\s*_\w+"
)


def test_no_code_of_the_project_names_a_private_langgraph_name():
    """A private name (a module under `_internal`, a `__pregel_*` channel or path, the
    functional API's `__return__` channel) can change in any release: the app keeps to public
    API (DESIGN.md, invariant 17)."""
    offenders = [
        f"{path.relative_to(ROOT)}: {found.group(0)}"
        for folder in sorted(ROOT.iterdir())
        if folder.is_dir() and folder.name not in {"tests", "var"} and folder.name[0] != "."
        for path in folder.rglob("*.py")
        for found in PRIVATE_LANGGRAPH.finditer(path.read_text())
    ]
    assert offenders == []


def test_the_private_name_rule_finds_each_kind_of_name():
    for text in (
        'path[0] == "__pregel_push"',
        'RESULT = "__return__"',
        "from langgraph._internal._constants import RETURN",
        "import langgraph.pregel._read",
        "from langgraph.constants import _TAG",
    ):
        assert PRIVATE_LANGGRAPH.search(text), text
    assert not PRIVATE_LANGGRAPH.search("from langgraph.types import Send")


def test_the_production_settings_wire_no_test_hook():
    # devtools' app wires its crash points in when a plan is set (devtools/apps.py).
    assert "devtools." not in (ROOT / "config" / "settings.py").read_text()
