"""Every key's `backbones=` claim (schema.py) is bound to code: a key claimed for verl or Trinity either changes
that backbone's translated config when it changes, or is read (as an attribute of its section) by code that
backbone's run imports (its backbone module, its worker: verl's agent loop, Trinity's workflow, and what they
import). A key claimed for a backbone that neither translates nor reads it fails here, naming it."""

from __future__ import annotations

import ast
import copy
import json
import re
import typing
from functools import lru_cache
from pathlib import Path

import pytest

from astuner.config import load_run_config
from astuner.config.keys import declared
from astuner.config.schema import AstunerConfig
from tests.conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "astuner"
# the built-in judges are loaded by name (task_judge.judge_protocol) in every backbone's workers
JUDGES = [str(p.relative_to(REPO_ROOT)) for p in sorted((PACKAGE / "task_judge").glob("*.py"))]
ENTRIES = {"verl": ["astuner/backbone/verl/backbone.py", "astuner/backbone/verl/agent_loop.py", *JUDGES],
           "trinity": ["astuner/backbone/trinity/backbone.py", "astuner/backbone/trinity/workflow.py", *JUDGES]}
# where keys are declared or turned into dataclasses, not read
NOT_READERS = {"astuner/config/schema.py", "astuner/config/keys.py", "astuner/config/reference.py",
               "astuner/config/validate.py"}
# the debug trainer's code and its engines, which the distributed runs import for the warm start alone: only the
# warm start's modules among them read keys for verl and Trinity
DEBUG_ONLY = ("astuner/backbone/debug/", "astuner/model/engines/")
WARM_START = {"astuner/backbone/debug/warm_start.py", "astuner/backbone/debug/sft.py"}


def module_file(name: str) -> Path | None:
    base = REPO_ROOT / Path(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=None)
def imported_by(path: Path) -> frozenset[Path]:
    """astuner's modules `path` imports, at its head or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            found = module_file(name) if name.startswith("astuner") else None
            if found is not None:
                out.add(found)
    return frozenset(out)


@lru_cache(maxsize=None)
def closure(backbone: str) -> tuple[str, ...]:
    """The source of every astuner module the backbone's run imports."""
    seen: set[Path] = set()
    todo = [REPO_ROOT / p for p in ENTRIES[backbone]]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(imported_by(path) - seen)
    names = {str(p.relative_to(REPO_ROOT)): p for p in seen}
    return tuple(p.read_text(encoding="utf-8") for name, p in sorted(names.items())
                 if name not in NOT_READERS and (name in WARM_START or not name.startswith(DEBUG_ONLY)))


def read_by(backbone: str, path: str) -> bool:
    """Some module of the backbone's run reads the key: `.leaf` and, below a top-level section, its section's
    name in the same module."""
    parts = path.split(".")[1:]
    leaf = re.compile(rf"\.{re.escape(parts[-1])}\b")
    parent = re.compile(rf"\b{re.escape(parts[-2])}\b") if len(parts) > 2 else None
    return any(leaf.search(src) and (parent is None or parent.search(src)) for src in closure(backbone))


def changed_value(item):
    """Another value of the key, or None where none is simple to make (a mapping of sections)."""
    spec, default = item.spec, item.default
    others = [c for c in spec.choices if c != default]
    if spec.choices:
        return others[0] if others else None
    args = [a for a in typing.get_args(item.type) if a is not type(None)]
    base = args[0] if typing.get_origin(item.type) is typing.Union and args else item.type
    if base is bool:
        return not default
    if base is int:
        return default * 2 if default else 3
    if base is float:
        return default / 2 if default else 0.25
    if typing.get_origin(base) is list:
        return [*default, default[-1]] if default else ["x"]
    if typing.get_origin(base) is dict and not any(hasattr(a, "__dataclass_fields__") for a in typing.get_args(base)):
        return {**default, "x": 1}
    return None


def translated(backbone: str, run, root: Path) -> str:
    from astuner.backbone.trinity.translate import translate_to_trinity
    from astuner.backbone.verl.translate import translate_to_verl

    try:
        out = (translate_to_verl if backbone == "verl" else translate_to_trinity)(run, root)
    except Exception as exc:  # noqa: BLE001 - a value the translation refuses: it reads the key
        return f"refused: {type(exc).__name__}: {exc}"
    return json.dumps(out, sort_keys=True, default=str)


def getattr_path(cfg, path: str):
    """The key's value, or its declared default where its section is null (made by set_key's defaults)."""
    from astuner.config.keys import nested_dataclass

    node = cfg
    for part in path.split(".")[1:]:
        if node is None:
            return None
        child = getattr(node, part, None)
        if child is None and part != path.rsplit(".", 1)[1]:
            section = nested_dataclass(typing.get_type_hints(type(node)).get(part))
            child = section() if section is not None else None
        node = child
    return node


def set_key(cfg, path: str, value) -> bool:
    """Set the key; a section that is null unless set (model.lora, task_reader.data_selector) is set to its
    defaults first."""
    from astuner.config.keys import nested_dataclass

    node = cfg
    parts = path.split(".")[1:]
    for part in parts[:-1]:
        child = getattr(node, part, None)
        if child is None:
            section = nested_dataclass(typing.get_type_hints(type(node)).get(part))
            if section is None:
                return False
            child = section()
            setattr(node, part, child)
        node = child
    setattr(node, parts[-1], value)
    return True


@pytest.mark.parametrize("backbone", ["verl", "trinity"])
def test_every_key_claimed_for_a_backbone_is_translated_or_read_by_its_run(backbone, tiny_model_dir, tmp_path):
    run = load_run_config(REPO_ROOT / "tutorial" / "example_tool_cpu" / "calc_agent.yaml",
                          overrides=[f"astuner.model.path={tiny_model_dir}"])
    unbound, by_translation, bases = [], 0, {}
    for item in declared(AstunerConfig):
        if item.is_section or item.optional_section is not None or backbone not in item.spec.backbones:
            continue  # a section: its keys are checked
        value = changed_value(item)
        if value is not None:
            # the base: the tutorial's config, with the key's section at its defaults where it is null unless set
            # (model.lora): a key inside it is compared with the section on, not with it off
            parent = item.path.rsplit(".", 1)[0]
            if parent not in bases:
                section_on = copy.deepcopy(run)
                set_key(section_on.astuner, item.path, getattr_path(section_on.astuner, item.path))
                bases[parent] = (section_on, translated(backbone, section_on, tmp_path))
            section_on, base = bases[parent]
            other = copy.deepcopy(section_on)
            if set_key(other.astuner, item.path, value) and translated(backbone, other, tmp_path) != base:
                by_translation += 1
                continue
        if not read_by(backbone, item.path):
            unbound.append(item.path)
    assert not unbound, (f"claimed for {backbone} (schema.py backbones=) but neither translated nor read by its run: "
                         f"{unbound}")
    assert by_translation > 30  # the translation is exercised, not skipped


@pytest.mark.parametrize("backbone", ["verl", "trinity"])
def test_a_key_no_code_of_the_backbone_reads_is_caught(backbone):
    """The check itself: a made-up key is not read; a key only the debug trainer reads is not read by verl's run."""
    assert not read_by(backbone, "astuner.rollout.no_such_key_anywhere")
    assert not read_by(backbone, "astuner.trainer_common.sft.no_such_key_anywhere")
    assert read_by(backbone, "astuner.rollout.max_error_rate")  # the rollout manager in its workers
