"""Files generated from the declaration of the config keys (`schema.py`): the default YAML with its comments, and
the reference table in docs/configuration.md. A test fails when either is stale.

    python -m astuner.config.reference                   # print the reference table
    python -m astuner.config.reference --write docs/configuration.md  # rewrite the default YAML and the table in docs/configuration.md
"""

from __future__ import annotations

import dataclasses
import textwrap
import typing
from pathlib import Path
from typing import Any

import yaml

from astuner.config.keys import ALL_BACKBONES, Declared, declared, spec_of
from astuner.config.schema import AstunerConfig

DEFAULT_YAML = Path(__file__).resolve().parent.parent / "default_config" / "astuner_default.yaml"
WIDTH = 116


def _shown(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip().removesuffix("...").strip()


def _comment(text: str, indent: str) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), WIDTH - len(indent) - 2, initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}# ", break_on_hyphens=False, break_long_words=False)


def _help(spec: Any) -> str:
    """The key's help; its allowed values added where the help does not name them all."""
    if spec.choices and not all(choice in spec.help for choice in spec.choices):
        return f"{spec.help} One of: {' | '.join(spec.choices)}."
    return spec.help


def _yaml_lines(cls: type, depth: int) -> list[str]:
    indent = "  " * depth
    lines: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        spec = spec_of(f)
        if dataclasses.is_dataclass(hints[f.name]):
            if depth == 1:
                lines.append("")
            lines += _comment(spec.help, indent) + [f"{indent}{f.name}:"] + _yaml_lines(hints[f.name], depth + 1)
        else:
            default = getattr(cls(), f.name)
            lines += _comment(_help(spec), indent) + [f"{indent}{f.name}: {_shown(default)}"]
    return lines


def default_yaml() -> str:
    """The default YAML: every key of the `astuner:` tree with its default, its help as the comment above it."""
    head = _comment((AstunerConfig.__doc__ or "").strip(), "") + [
        "# Generated from astuner/config/schema.py (python -m astuner.config.reference --write docs/configuration.md); edit",
        "# the declarations there, not this file.", "astuner:"]
    return "\n".join(head + _yaml_lines(AstunerConfig, 1)) + "\n"


def _documented(items: list[Declared]) -> list[Declared]:
    """The keys the table lists: sections are not rows; an optional section that repeats a regular one
    (data_selector: task_selector) gets its own row but not its keys again."""
    regular = {item.type for item in items if item.is_section}
    out, skip = [], ()
    for item in items:
        if skip and item.path.startswith(skip):
            continue
        skip = ()
        if item.optional_section is not None and item.optional_section in regular:
            skip = (item.path + ".",)
        if not item.is_section:
            out.append(item)
    return out


def reference_table() -> str:
    rows = ["| key | default | allowed | backbones | meaning |", "| --- | --- | --- | --- | --- |"]
    for item in _documented(list(declared(AstunerConfig))):
        spec = item.spec
        backbones = "all" if spec.backbones == ALL_BACKBONES else (", ".join(spec.backbones) or "none")
        allowed = spec.shown_constraint() or ("required" if spec.required else "")
        rows.append(f"| `{item.path}` | `{_shown(item.default)}` | {allowed.replace('|', '/')} | {backbones} | "
                    f"{' '.join(spec.help.split()).replace('|', '/')} |")
    return "\n".join(rows)


def render() -> str:
    return reference_table() + "\n"


START, END = "<!-- config-reference:start -->\n", "<!-- config-reference:end -->"


def write_into(readme: Path) -> None:
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + START + render() + END + tail, encoding="utf-8")
    DEFAULT_YAML.write_text(default_yaml(), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:2] == ["--write"]:
        write_into(Path(sys.argv[2]))
    else:
        print(render(), end="")
