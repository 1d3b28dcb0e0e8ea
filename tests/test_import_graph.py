"""The import graph of the project's packages: one-way arrows, no cycles (DESIGN.md section 2).

Every `import` in every module counts, wherever it sits: at the top, inside a function, under
`if TYPE_CHECKING:`. A function-local import does not make a cycle go away, it only moves the moment
it bites (a half-initialised module, an import that works or fails depending on which module a
process loaded first), and it hides the dependency from a reader of the module's header; so the
graph is read with `ast` from the source, never from `sys.modules` after the fact. What it cannot see
is a module named in a string (`importlib.import_module(name)`: cli.main loads its commands' modules,
all in cli/, so, and kernels/ its problems); test_the_command_registry_stays_in_cli checks the first.

Two rules are checked over that graph:

- no cycles: the module graph, less the few edges in KNOWN_BACK_EDGES, has no cycle;
- the layering: an import from one package into another follows an arrow of ALLOWED (cli/ may import
  every other package and none imports it; server/ and client/ never import each other; tools/,
  state/ and kernels/ never import server/, client/ or cli/; kernels/ imports only kernels/).

KNOWN_BACK_EDGES is the list of what breaks those rules, empty since the command line moved into cli/;
it is kept so that an edge excused while a move is under way has one place to be listed, and it may
only shrink: an entry that no longer exists fails the test too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cli", "server", "tools", "kernels", "state", "client")

# Which packages a package may import (itself always). Nothing may import cli/.
ALLOWED: Mapping[str, frozenset[str]] = {
    "cli": frozenset({"server", "client", "tools", "state", "kernels"}),
    "server": frozenset({"tools", "state", "kernels"}),
    "client": frozenset({"state"}),
    "tools": frozenset({"kernels"}),
    "kernels": frozenset(),
    "state": frozenset(),
}

# (importer, imported) module pairs that break the layering: none.
KNOWN_BACK_EDGES: frozenset[tuple[str, str]] = frozenset()


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of the packages (a package's __init__ under the package's name)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(root, path)] = path
    return found


def _resolve(target: str, modules: Mapping[str, Path]) -> str | None:
    """The project module that importing `target` loads: itself, or the nearest enclosing module (an
    attribute of a module, `from state.log import Event` -> state.log); None outside the project."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may load, with relative imports made absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    # `from pkg import name`: `name` may be a submodule (loaded) or an attribute of pkg.
    return [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"] + [base]


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """module -> the project modules it imports, anywhere in its source."""
    modules = project_modules(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            targets = _imported(node, name, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):
                # `from pkg import sub` loads pkg.sub where it is a module; otherwise only pkg.
                *names, base = targets
                hits: set[str | None] = {t for t in names if t in modules}
                resolved = hits or {_resolve(base, modules)}
            else:
                resolved = {_resolve(t, modules) for t in targets}
            graph[name].update(t for t in resolved if t is not None and t != name)
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layering_violations(graph: Mapping[str, Iterable[str]],
                        allowed: Mapping[str, frozenset[str]] = ALLOWED) -> set[tuple[str, str]]:
    """Imports from one package into another that no arrow of `allowed` permits."""
    bad = set()
    for importer, imported in ((a, b) for a, targets in graph.items() for b in targets):
        src, dst = importer.partition(".")[0], imported.partition(".")[0]
        if src != dst and dst not in allowed.get(src, frozenset()):
            bad.add((importer, imported))
    return bad


def without(graph: Mapping[str, Iterable[str]], edges: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    drop = set(edges)
    return {a: {b for b in targets if (a, b) not in drop} for a, targets in graph.items()}


def _show(edges: Iterable[tuple[str, str]]) -> str:
    return "\n".join(f"  {a} -> {b}" for a, b in sorted(edges))


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT)


def test_the_graph_sees_the_whole_project(graph: dict[str, set[str]]) -> None:
    """A guard on the guard: a graph that found no modules or no edges would pass every rule below."""
    assert {"state.log", "state.export", "tools.aot", "tools.hotspots", "tools.ncu", "server.service",
            "client.loop", "cli.main", "cli.jobs", "kernels.spec"} <= graph.keys()
    assert "state.export" in graph["state.log"] and "tools.ncu_run" in graph["tools.hotspots"]


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    """No module imports itself through others, counting function-local and TYPE_CHECKING imports."""
    found = cycles(without(graph, KNOWN_BACK_EDGES))
    assert not found, "import cycles (break them with a module both sides import, not a local import):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in found)


def test_no_cycle_between_packages(graph: dict[str, set[str]]) -> None:
    """Packages, not only modules, import one way: a client module importing a server module and another
    server module importing a third client module make no module cycle, but client/ and server/ would
    import each other."""
    edges = {(a, b) for a, targets in without(graph, KNOWN_BACK_EDGES).items() for b in targets}
    packages: dict[str, set[str]] = {}
    for a, b in edges:
        if a.partition(".")[0] != b.partition(".")[0]:
            packages.setdefault(a.partition(".")[0], set()).add(b.partition(".")[0])
    assert cycles(packages) == []


@pytest.mark.parametrize("package", ["tools", "state", "kernels"])
def test_no_cycle_within_a_package(graph: dict[str, set[str]], package: str) -> None:
    """Within tools/, state/ and kernels/ no cycle is excused, known back edges or not."""
    inside = {a: {b for b in targets if b.partition(".")[0] == package}
              for a, targets in graph.items() if a.partition(".")[0] == package}
    assert cycles(inside) == []


def test_the_layering_holds(graph: dict[str, set[str]]) -> None:
    """Every import across packages follows an arrow of ALLOWED, or is a known back edge."""
    new = layering_violations(graph) - KNOWN_BACK_EDGES
    assert not new, "imports against the layering (DESIGN.md section 2):\n" + _show(new)


def test_the_known_back_edges_still_exist(graph: dict[str, set[str]]) -> None:
    """An edge that is gone comes off KNOWN_BACK_EDGES, so the list cannot excuse it coming back."""
    gone = {(a, b) for a, b in KNOWN_BACK_EDGES if b not in graph.get(a, set())}
    assert not gone, "no longer imported, remove from KNOWN_BACK_EDGES:\n" + _show(gone)
    assert KNOWN_BACK_EDGES <= layering_violations(graph), "a known back edge that breaks no rule is not one"


def test_the_allowed_arrows_point_one_way() -> None:
    """ALLOWED itself has no cycle between packages, so following it can never build one."""
    assert cycles({src: set(dsts) for src, dsts in ALLOWED.items()}) == []
    assert set(ALLOWED) == set(PACKAGES)
    for low in ("tools", "state", "kernels"):
        assert not ALLOWED[low] & {"server", "client", "cli"}
    assert ALLOWED["kernels"] == frozenset() and ALLOWED["state"] == frozenset()
    assert not ALLOWED["server"] & {"client", "cli"} and not ALLOWED["client"] & {"server", "cli"}
    assert ALLOWED["cli"] == frozenset(PACKAGES) - {"cli"}


def test_nothing_imports_cli(graph: dict[str, set[str]]) -> None:
    """cli/ is the front door: it imports the rest and nothing, anywhere, imports it back."""
    into = {(a, b) for a, targets in graph.items() for b in targets
            if b.partition(".")[0] == "cli" and a.partition(".")[0] != "cli"}
    assert not into, "imports of cli/ from outside it:\n" + _show(into)


def test_the_command_registry_stays_in_cli(graph: dict[str, set[str]]) -> None:
    """The modules cli.main loads by name (its command registry) are cli/'s own, so that import the
    graph cannot see cannot point anywhere else; and they do not import cli.main back."""
    from cli.main import COMMANDS

    targets = {entry.target.partition(":")[0] for entry in COMMANDS.values()}
    assert targets <= {m for m in graph if m.startswith("cli.")}, targets
    assert not any("cli.main" in graph[m] for m in targets)


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_hidden_in_a_function_is_found(tmp_path: Path) -> None:
    """The cycle this test exists for: a top-level import one way, a function-local one back (relative
    and under TYPE_CHECKING too); and one that goes through a third module."""
    root = _tree(tmp_path, {
        "state/__init__.py": "",
        "state/log.py": "from .export import export_run\n",
        "state/export.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .log import EventLog\n",
        "tools/a.py": "import tools.b\n",
        "tools/b.py": "def f():\n    from tools import c\n",
        "tools/c.py": "def g():\n    from tools.a import h\n",
        "tools/d.py": "from tools.a import h\n",
    })
    graph = import_graph(root, ("state", "tools"))
    assert graph["state.export"] == {"state.log"} and graph["tools.b"] == {"tools.c"}
    assert cycles(graph) == [["state.export", "state.log"], ["tools.a", "tools.b", "tools.c"]]


def test_a_back_edge_is_found(tmp_path: Path) -> None:
    """tools/ importing server/ from inside a function, and kernels/ importing tools/, break the layering."""
    root = _tree(tmp_path, {
        "server/__init__.py": "", "server/service.py": "import tools.x\n",
        "tools/x.py": "def f():\n    from server.service import Service\n",
        "kernels/__init__.py": "", "kernels/p.py": "from tools import x\n",
        "state/__init__.py": "", "client/__init__.py": "",
    })
    graph = import_graph(root)
    assert layering_violations(graph) == {("tools.x", "server.service"), ("kernels.p", "tools.x")}
    assert cycles(graph) == [["server.service", "tools.x"]]
