"""Where each config key came from: a line of the user's YAML, a command-line override, or a default.

Used to make every config error point at the place the user has to edit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import yaml


INTERPOLATION = re.compile(r"^\$\{([\w.]+)\}$")


def yaml_line_map(path: Path, interpolations: Optional[dict[str, str]] = None) -> dict[str, int]:
    """Dotted key -> 1-based line number for every mapping key in a YAML file. `interpolations`, when given,
    receives each key whose value is just `${other.key}`: key -> other.key."""
    with open(path, encoding="utf-8") as fh:
        root = yaml.compose(fh, Loader=yaml.SafeLoader)
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                dotted = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                lines[dotted] = key_node.start_mark.line + 1
                if interpolations is not None and isinstance(value_node, yaml.ScalarNode):
                    match = INTERPOLATION.match(str(value_node.value))
                    if match:
                        interpolations[dotted] = match.group(1)
                walk(value_node, dotted)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[f"{prefix}[{i}]"] = item.start_mark.line + 1
                walk(item, f"{prefix}[{i}]")

    if root is not None:
        walk(root, "")
    return lines


def override_key(override: str) -> str:
    """The dotted key an override such as `+astuner.x=1` or `~astuner.y` names."""
    key = override.split("=", 1)[0].strip()
    return key.lstrip("+~")


class SourceMap:
    """Answers `where(dotted_key)` with a human-readable location."""

    def __init__(self, conf_path: Path, overrides: list[str]):
        self.conf_path = conf_path
        self.interpolations: dict[str, str] = {}  # key -> the key its value `${...}` takes
        try:
            self.lines = yaml_line_map(conf_path, self.interpolations)
        except yaml.YAMLError:
            self.lines = {}
        self.overrides = {override_key(o): o for o in overrides}

    def where(self, dotted: str) -> str:
        if dotted in self.overrides:
            return f"command-line override '{self.overrides[dotted]}'"
        line = self.line(dotted)
        if line is not None:
            return f"{self.conf_path}:{line}"
        return f"{self.conf_path} (value from astuner defaults)"

    def line(self, dotted: str) -> Optional[int]:
        """Line of the key, or of its nearest parent written in the file (flow mappings, lists)."""
        parts = dotted.replace("[", ".[").split(".")
        while parts:
            key = ".".join(parts).replace(".[", "[")
            if key in self.lines:
                return self.lines[key]
            parts.pop()
        return None

    def from_user(self, dotted: str) -> bool:
        return dotted in self.overrides or dotted in self.lines
