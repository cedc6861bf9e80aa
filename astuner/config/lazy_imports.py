"""Imports a workflow or judge makes inside its own body, of a package this environment does not have.

Such an import fails on every call, so a run would fail every episode and stop at the first validation. The
plug-in's source is read (`ast`) before anything is written, and each such import refused in one line, naming the
file and line. An import inside `try:` (an optional dependency the code handles) is left alone. Trinity-RFT's
reward functions (agentscope.tuner's samples import `trinity.common.rewards...` in their judges) get the astuner
function to use instead: Trinity-RFT has an environment of its own (the trinity backbone's).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import textwrap
from typing import Any, Optional

# a foreign package's modules -> what to use on astuner's main environment instead
INSTEAD = {
    "trinity.common.rewards": "score with astuner.task_judge.math_answer (extract_answer, answers_match: the last "
                              "\\boxed{} against the ground truth, numbers compared as numbers) or the judge "
                              "astuner.task_judge.math_answer_as_judge->MathAnswerAsJudge",
    "trinity": "Trinity-RFT runs in an environment of its own, with --backbone trinity",
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def _sources(obj: Any) -> list[tuple[str, int, str]]:
    """(file, first line, source) of the function, or of each function a class defines."""
    functions = [obj] if inspect.isfunction(obj) else \
        [f for f in vars(obj).values() if inspect.isfunction(f)] if inspect.isclass(obj) else []
    out = []
    for fn in functions:
        try:
            lines, start = inspect.getsourcelines(fn)
            out.append((inspect.getsourcefile(fn) or "?", start, textwrap.dedent("".join(lines))))
        except (OSError, TypeError):  # defined where there is no source (a REPL, a compiled module)
            continue
    return out


def parsed_sources(obj: Any) -> list[tuple[str, int, ast.AST]]:
    """(file, first line, syntax tree) of the function, or of each function a class defines (those that parse)."""
    out = []
    for path, start, source in _sources(obj):
        try:
            out.append((path, start, ast.parse(source)))
        except SyntaxError:
            continue
    return out


def missing_imports(obj: Any) -> list[tuple[str, str, int]]:
    """(module, file, line) of each import in `obj`'s body of a package not installed here, outside `try:`."""
    found = []
    for path, start, tree in parsed_sources(obj):
        guarded = {id(node) for t in ast.walk(tree) if isinstance(t, ast.Try) for stmt in t.body
                   for node in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [(name, path, start + node.lineno - 1) for name in names if not _installed(name)]
    return found


def lazy_import_problem(obj: Any, key: str) -> Optional[str]:
    """One line refusing `obj` (the plug-in `key` names) for the first package its body imports and this
    environment lacks; None when there is none."""
    missing = missing_imports(obj)
    if not missing:
        return None
    module, path, line = missing[0]
    instead = next((why for prefix, why in INSTEAD.items() if module == prefix or module.startswith(prefix + ".")),
                   f"install {module.split('.')[0]} into this environment")
    return (f"{key}: {getattr(obj, '__name__', obj)!s} imports {module} (at {path}:{line}), which is not installed in "
            f"this environment, so every episode would fail on it; {instead}")
