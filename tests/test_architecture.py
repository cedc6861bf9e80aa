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
    {"errors", "interrupts", "version"},
    {"cli_args"},  # a subcommand's main says its AstunerErrors (run_command)
    {"schema"},
    {"config"},
    {"algorithm", "env_service", "tools", "records", "data", "task_judge", "task_rollout"},
    {"task_reader", "viewer", "gateway"},
    {"model"},
    {"workflow", "tiny_model"},  # tiny_model: the older path of model.tiny_model
    {"rollout", "plugins"},
    {"backbone"},
    {"backbone.debug"},  # the reference backbone: verl and Trinity run its warm start (debug/warm_start.py)
    {"backbone.verl"},
    {"backbone.trinity"},  # Trinity trains through its bundled verl: it reuses verl's CPU platform
    {"preflight"},
    {"run", "chat"},
    {"evaluate"},  # astuner eval; select_model (astuner.tuner) on it
    {"serve", "traces"},  # astuner serve (a model for an agent in use, its calls into a trace store), traces
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


# -- claims of docs/architecture.md that the code can be checked against ------------------------------------

DOC = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
HEAVY = ("ray", "verl", "vllm", "trinity")  # each distributed backbone's own packages
BACKBONE_PACKAGES = ("astuner.backbone.debug", "astuner.backbone.verl", "astuner.backbone.trinity")


def _doc_path(module: str) -> str:
    """`astuner.model.engines.vllm_engine` as the page writes it: `model/engines/vllm_engine.py`."""
    return "/".join(module.split(".")[1:]) + ".py"


def heavy_imports() -> dict[str, set[tuple[str, bool]]]:
    """{module: {(heavy package, imported when the module loads)}}: function bodies run later; a class body, an
    `if` or a `try` at module level run when it loads."""
    found: dict[str, set[tuple[str, bool]]] = defaultdict(set)
    for name, path in modules().items():
        def visit(node: ast.AST, at_load: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    continue
                if isinstance(child, ast.Import):
                    targets = [alias.name for alias in child.names]
                elif isinstance(child, ast.ImportFrom) and not child.level:
                    targets = [child.module or ""]
                else:
                    targets = []
                for target in targets:
                    if target.split(".")[0] in HEAVY:
                        found[name].add((target.split(".")[0], at_load))
                visit(child, at_load and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return found


def test_heavy_packages_are_imported_where_the_page_says():
    """verl, trinity, ray and vllm: in the backbone packages, and elsewhere only inside functions, in the files
    docs/architecture.md names."""
    outside = {m: imports for m, imports in heavy_imports().items() if not m.startswith(BACKBONE_PACKAGES)}
    at_load = sorted(f"{m} imports {p} when it loads" for m, imports in outside.items() for p, load in imports if load)
    assert not at_load, "\n".join(at_load)
    unnamed = sorted(f"{_doc_path(m)} imports {', '.join(sorted(p for p, _ in imports))}"
                     for m, imports in outside.items() if f"`{_doc_path(m)}`" not in DOC)
    assert not unnamed, "files that import a backbone's package, not named in docs/architecture.md:\n" + \
        "\n".join(unnamed)
    assert "astuner.model.engines.vllm_engine" in outside  # the reading sees function-level imports


BACKBONE_NAMES = ("debug", "verl", "trinity")


def name_comparisons() -> dict[str, list[int]]:
    """{module: lines} where a value is compared with a backbone's name (==, !=, in a tuple of names)."""
    found: dict[str, list[int]] = defaultdict(list)
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            for side in (node.left, *node.comparators):
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(v, ast.Constant) and v.value in BACKBONE_NAMES for v in values):
                    found[name].append(node.lineno)
                    break
    return found


def test_only_the_files_the_page_names_choose_by_backbone_name():
    """Everything else asks the backbone object the registry returns (docs/architecture.md says why these do)."""
    found = name_comparisons()
    unnamed = sorted(f"{_doc_path(m)}:{','.join(map(str, sorted(lines)))}" for m, lines in found.items()
                     if f"`{_doc_path(m)}`" not in DOC)
    assert not unnamed, "files comparing the backbone's name, not named in docs/architecture.md:\n" + \
        "\n".join(unnamed)
    assert "astuner.compat.trinity.translator" in found  # the reading sees `self.backbone == "trinity"`


def test_each_test_folder_is_named_for_the_package_it_tests():
    """tests/<package>/ for astuner/<package>/ or <module>.py (backbone/<name>_backbone/ for
    astuner/backbone/<name>/), as docs/architecture.md describes the tests' layout; samples/ holds the
    agentscope-samples games."""
    entry = DOC[DOC.index("\ntests/ "):DOC.index("\n.ci/ ")]
    stray = []
    for folder in sorted(p for p in (REPO_ROOT / "tests").rglob("*") if p.is_dir() and (p / "__init__.py").exists()):
        parts = list(folder.relative_to(REPO_ROOT / "tests").parts)
        assert f"{folder.name}/" in entry, f"{folder.relative_to(REPO_ROOT)}: not in docs/architecture.md's tests entry"
        if parts[0] == "samples":
            continue
        parts = [part.removesuffix("_backbone") if i == 1 and parts[0] == "backbone" else part
                 for i, part in enumerate(parts)]
        tested = PACKAGE.joinpath(*parts)
        if not ((tested / "__init__.py").exists() or tested.with_suffix(".py").exists()):
            stray.append(str(folder.relative_to(REPO_ROOT)))
    assert not stray, f"test folders named for no package or module of astuner/: {stray}"
