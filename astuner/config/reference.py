"""Render the config reference (README) from the comments of the default YAML files.

    python -m astuner.config.reference                   # print the Markdown table
    python -m astuner.config.reference --write README.md  # replace the table between the README's markers
"""

from __future__ import annotations

from pathlib import Path

import yaml

from astuner.config.compose import DEFAULT_CONFIG_DIRS
from astuner.config.source_map import yaml_line_map


def _comment_above(lines: list[str], lineno: int) -> str:
    out: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        out.insert(0, lines[i].strip().lstrip("#").strip())
        i -= 1
    return " ".join(out)


def _value(data: dict, dotted: str) -> object:
    node: object = data
    for part in dotted.split("."):
        node = node[part]  # type: ignore[index]
    return node


def reference_table(path: Path) -> str:
    lines = path.read_text(encoding="utf-8").splitlines()
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    for key, lineno in yaml_line_map(path).items():
        if "[" in key:
            continue
        value = _value(data, key)
        if isinstance(value, dict) and value:
            continue  # a section; its keys have rows of their own
        shown = "`" + yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip() + "`"
        rows.append(f"| `{key}` | {shown} | {_comment_above(lines, lineno).replace('|', '/')} |")
    return "\n".join(rows)


def render() -> str:
    return reference_table(DEFAULT_CONFIG_DIRS[0] / "astuner_default.yaml") + "\n"


START, END = "<!-- config-reference:start -->\n", "<!-- config-reference:end -->"


def write_into(readme: Path) -> None:
    text = readme.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + START + render() + END + tail, encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:2] == ["--write"]:
        write_into(Path(sys.argv[2]))
    else:
        print(render(), end="")
