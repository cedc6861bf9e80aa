"""The package's layout is its architecture: each folder (or top-level module) sits on a floor, imports only from
floors below it, and no two files import each other in a circle (the Trinity-RFT config importer, a translation
of one foreign schema, is the one place allowed to). Read from the import graph, function-level imports included
(those under `if TYPE_CHECKING:` do not run and are left out)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "astuner"
# bottom to top; units on one floor do not import each other
FLOORS = [
    {"errors", "interrupts", "cli_args"},
    {"schema"},
    {"config"},
    {"algorithm", "env_service", "tools", "records", "data", "task_judge"},
    {"task_reader", "viewer", "gateway"},
    {"model"},
    {"workflow"},
    {"rollout", "plugins"},
    {"backbone"},
    {"backbone.debug", "backbone.verl"},
    {"backbone.trinity"},  # Trinity trains through its bundled verl: it reuses verl's CPU platform
    {"preflight"},
    {"run", "chat"},
    {"compat"},
    {"api"},
    {"tuner", "cli"},
    {"__main__", "astuner"},
]
CYCLES_ALLOWED_IN = "astuner.compat.trinity."


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def import_graph() -> dict[str, set[str]]:
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

        def visit(node: ast.AST) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    for stmt in child.orelse:
                        visit(stmt)
                    continue
                targets = []
                if isinstance(child, ast.Import):
                    targets = [alias.name for alias in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = ".".join(package[:len(package) - child.level + 1] + [child.module or ""]).strip(".") \
                        if child.level else (child.module or "")
                    targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base
                               for alias in child.names]
                for target in targets:
                    found = resolve(target) if target.startswith("astuner") else None
                    if found and found != name:
                        graph[name].add(found)
                visit(child)

        visit(ast.parse(path.read_text(encoding="utf-8")))
    return graph


def unit(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "astuner"
    if parts[0] == "backbone" and len(parts) > 1 and parts[1] in ("debug", "verl", "trinity"):
        return f"backbone.{parts[1]}"
    return parts[0]


def floor(name: str) -> int:
    for i, names in enumerate(FLOORS):
        if name in names:
            return i
    raise AssertionError(f"astuner/{name.replace('.', '/')} is on no floor: add it to FLOORS in {__file__}")


def test_every_import_points_down():
    upward = sorted(f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                    if unit(a) != unit(b) and floor(unit(b)) >= floor(unit(a)))
    assert not upward, "imports that point up or sideways:\n" + "\n".join(upward)


def test_no_file_imports_itself_through_others():
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def strongly_connected(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongly_connected(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 and not all(m.startswith(CYCLES_ALLOWED_IN) for m in group):
                cycles.append(sorted(group))

    for module in modules():
        if module not in index:
            strongly_connected(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_graph_sees_imports():
    """The checks above read real arrows: a few known ones (module level, in a function, relative) are there."""
    graph = import_graph()
    assert "astuner.config.schema" in graph["astuner.config.validate"]
    assert "astuner.backbone.debug.loop" in graph["astuner.backbone.debug.backbone"]  # inside run()
    assert "astuner.schema.calls" in graph["astuner.rollout.tracker"]
    assert floor(unit("astuner.backbone.verl.translate")) > floor(unit("astuner.backbone.machine"))
