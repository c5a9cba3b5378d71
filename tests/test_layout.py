"""Dependencies point down (DESIGN.md, Layout): no package or module cycle, core under
everything, the graph code free of Django, devtools used by nothing the app ships."""

import importlib.util
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
