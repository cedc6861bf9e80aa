"""Resolve plug-in strings: `package.module->Name` or `path/to/file.py->Name`.

Modules are imported with the cwd on sys.path; files are looked up relative to the cwd. When not found
there, the folders in `extra_roots` (the config file's folder, then each of its parents) are tried in
order, so a config works from any directory. Every failure is a `PluginError` naming the config key, the plug-in
string, what went wrong and how to fix it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Optional, Sequence

from astuner.config.moved import moved
from astuner.config.paths import find_user_path, tried_paths
from astuner.errors import PluginError

SEPARATOR = "->"


def split_plugin_string(spec: str, key: str) -> tuple[str, str]:
    if isinstance(spec, str) and spec.rstrip().endswith("-") and SEPARATOR not in spec:
        raise PluginError(f"{key}: plug-in string {spec!r} ends at '-': the shell read '>' as a redirect (and made "
                          f"a file); quote the override: '{key}=pkg.module->Name'")
    if not isinstance(spec, str) or SEPARATOR not in spec:
        raise PluginError(f"{key}: plug-in string {spec!r} has no '{SEPARATOR}'; write 'package.module->Name' "
                          f"or 'path/to/file.py->Name'")
    target, _, name = spec.rpartition(SEPARATOR)
    target, name = target.strip(), name.strip()
    if not target or not name or not name.isidentifier():
        raise PluginError(f"{key}: plug-in string {spec!r} must be 'package.module->Name' or "
                          f"'path/to/file.py->Name' with a Python name after '{SEPARATOR}'")
    return target, name


def _is_file_target(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _named_module(exc: ModuleNotFoundError) -> str:
    """The module the failing import statement named (`astuner.utils.robust_dashscope`), which the error does not
    give: it names the first package missing (`astuner.utils`)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    line = frames[-1].line if frames else ""
    named = re.search(r"(?:from|import)\s+(astuner[\w.]*)", line or "")
    return named.group(1) if named and exc.name and named.group(1).startswith(exc.name) else (exc.name or "")


def _import_failure(spec: str, key: str, what: str, exc: BaseException) -> PluginError:
    frames = traceback.extract_tb(exc.__traceback__)
    user_frames = [f for f in frames if "importlib" not in f.filename]
    where = f" at {user_frames[-1].filename}:{user_frames[-1].lineno}" if user_frames else ""
    if isinstance(exc, SyntaxError) and exc.filename:  # the user's file and line, not the import machinery's
        where = f" at {exc.filename}:{exc.lineno}"
        exc = SyntaxError(exc.msg)
    if isinstance(exc, ModuleNotFoundError) and moved(exc.name or ""):
        wanted = _named_module(exc)
        return PluginError(f"{key}: importing {what} for {spec!r} failed{where}: astuner has no module '{wanted}' "
                           f"(a name of the seed system's or an older layout): {moved(wanted)}")
    return PluginError(f"{key}: importing {what} for {spec!r} failed{where}: {type(exc).__name__}: {exc}")


def _load_file(path: Path, spec: str, key: str) -> ModuleType:
    module_name = f"astuner_plugin_{path.stem}_{abs(hash(str(path))) % 10**8}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # sibling imports of the plug-in file
    mod_spec = importlib.util.spec_from_file_location(module_name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise PluginError(f"{key}: {path} in {spec!r} cannot be loaded as a Python file")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[module_name] = module
    try:
        mod_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise _import_failure(spec, key, str(path), exc) from None
    return module


def _import_module(target: str, spec: str, key: str, extra_roots: Sequence[Path]) -> ModuleType:
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    top = target.split(".")[0]
    if importlib.util.find_spec(top) is None:
        for root in extra_roots:
            if (root / top).is_dir() or (root / f"{top}.py").is_file():
                if str(root) not in sys.path:
                    sys.path.append(str(root))
                break
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (target == missing or target.startswith(missing + ".")):
            raise PluginError(f"{key}: module '{missing}' of {spec!r} was not found on sys.path, in the cwd or "
                              f"beside the config; "
                              f"check the spelling, run from the folder that holds it, or name the file as "
                              f"'path/to/file.py->Name'") from None
        instead = moved(missing)
        if instead:
            wanted = _named_module(exc)
            raise PluginError(f"{key}: module '{target}' of {spec!r} imports '{wanted}', which astuner does not "
                              f"have (a name of the seed system's or an older layout): {moved(wanted)}") from None
        raise PluginError(f"{key}: module '{target}' of {spec!r} imports '{missing}', which is not installed; "
                          f"install it into this environment") from None
    except Exception as exc:
        raise _import_failure(spec, key, f"module '{target}'", exc) from None


def load_plugin_target(spec: str, key: str, extra_roots: Sequence[Path] = ()) -> tuple[ModuleType, str]:
    """Import the module or file a plug-in string names; returns (module, name)."""
    target, name = split_plugin_string(spec, key)
    if _is_file_target(target):
        found = find_user_path(target, extra_roots)
        if found is None or not found.is_file():
            raise PluginError(f"{key}: file '{target}' of {spec!r} does not exist "
                              f"(tried {tried_paths(target, extra_roots)})")
        return _load_file(found, spec, key), name
    return _import_module(target, spec, key, extra_roots), name


def _defined_names(module: ModuleType) -> list[str]:
    names = []
    for attr, value in vars(module).items():
        if attr.startswith("_"):
            continue
        if (inspect.isclass(value) or inspect.isfunction(value)) and getattr(value, "__module__", None) == module.__name__:
            names.append(attr)
    return sorted(names)


def resolve_plugin(spec: str, key: str, check: Optional[Callable[[Any], Optional[str]]] = None,
                   extra_roots: Sequence[Path] = ()) -> Any:
    """The object a plug-in string names. `check(obj)` returns None when the object is acceptable, or a
    description of what it must be (e.g. 'a Workflow subclass or an async function')."""
    module, name = load_plugin_target(spec, key, extra_roots)
    if not hasattr(module, name):
        defined = _defined_names(module)
        close = difflib.get_close_matches(name, defined, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        listing = ", ".join(defined) if defined else "no classes or functions"
        raise PluginError(f"{key}: '{name}' is not defined in {getattr(module, '__file__', module.__name__)} "
                          f"({spec!r}); {hint}it defines: {listing}")
    obj = getattr(module, name)
    if check is not None:
        problem = check(obj)
        if problem:
            raise PluginError(f"{key}: {spec!r} names {_describe(obj)}, but it must be {problem}")
    return obj


def _describe(obj: Any) -> str:
    if inspect.isclass(obj):
        return f"class {obj.__name__}"
    if inspect.iscoroutinefunction(obj):
        return f"async function {obj.__name__}"
    if inspect.isfunction(obj):
        return f"function {obj.__name__} (not async)"
    return f"a {type(obj).__name__} object"


def async_function_problem(obj: Any, min_positional: int) -> Optional[str]:
    """None when `obj` is an async function taking at least `min_positional` positional arguments."""
    if not inspect.iscoroutinefunction(obj):
        return f"{_describe(obj)} is not an async function"
    params = [p for p in inspect.signature(obj).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) < min_positional:
        return f"it takes {len(params)} positional parameter{'s' if len(params) != 1 else ''}, not {min_positional}"
    return None


def subclass_or_async_function_problem(obj: Any, base: type, method: str, expected: str,
                                       async_method: bool = False) -> Optional[str]:
    """None when `obj` is a subclass of `base` implementing `method` (as `async def` when `async_method`)
    or an async function of two or more positional parameters; else `expected` with the reason."""
    if inspect.isclass(obj):
        if not issubclass(obj, base) or obj is base:
            return expected
        impl = getattr(obj, method)
        if impl is getattr(base, method):
            return f"{expected}; {obj.__name__} does not implement {method}"
        if async_method and not inspect.iscoroutinefunction(impl):
            return f"{expected}; {obj.__name__}.{method} is not 'async def'"
        return None
    if inspect.iscoroutinefunction(obj):  # the user wrote a function: only the function's form is said
        problem = async_function_problem(obj, 2)
        return f"{expected.rsplit(' or ', 1)[-1]}; {problem}" if problem else None
    return expected
