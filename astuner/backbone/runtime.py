"""What the distributed backbones' workers need: the run's config and plug-ins, and our tasks as files.

The launching process writes the merged config (`config.yaml` in the run folder) and the tasks (JSON
lines, the astuner task as a JSON string per row so any metadata survives `datasets`' schema
inference); workers in other processes rebuild the typed config and import the plug-ins from there.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from astuner.schema import Task

TASK_COLUMN = "astuner_task"


def task_row(task: Task, feature_keys: Sequence[str] = ()) -> dict[str, Any]:
    """One row: the task as a JSON string, plus the feature columns a data selector reads."""
    return {TASK_COLUMN: json.dumps(task.to_dict(), ensure_ascii=False, default=str),
            **{k: task.metadata.get(k) for k in feature_keys}}


def task_from_row(row: dict[str, Any]) -> Task:
    raw = row[TASK_COLUMN]
    data = json.loads(raw) if isinstance(raw, str) else raw
    return Task(**data)


def write_rows(rows: Iterable[dict[str, Any]], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            count += 1
    return count


@functools.lru_cache(maxsize=8)
def load_saved_run(config_yaml: str, roots: tuple[str, ...]) -> tuple[Any, Any, Any]:
    """(AstunerConfig, workflow plug-in, judge instance or function) from a run folder's config.yaml."""
    import yaml

    from astuner.config import attach_composed
    from astuner.config.plugin import resolve_plugin
    from astuner.config.source_map import SourceMap
    from astuner.config.validate import validate_astuner_tree
    from astuner.rollout.manager import build_judge
    from astuner.task_judge.base import check_judge_plugin
    from astuner.workflow import check_workflow_plugin

    path = Path(config_yaml)
    merged = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg = validate_astuner_tree(merged["astuner"], SourceMap(path, []))
    attach_composed(cfg, merged)
    extra_roots: Sequence[Path] = [Path(r) for r in roots]
    workflow = resolve_plugin(cfg.rollout.agentscope_workflow, "astuner.rollout.agentscope_workflow",
                              check_workflow_plugin, extra_roots)
    judge = None
    if cfg.task_judge.judge_protocol:
        judge = build_judge(resolve_plugin(cfg.task_judge.judge_protocol, "astuner.task_judge.judge_protocol",
                                           check_judge_plugin, extra_roots), cfg)
    return cfg, workflow, judge


@functools.lru_cache(maxsize=4)
def cached_tokenizer(model_path: str) -> Any:
    from astuner.model.engines.factory import load_tokenizer

    return load_tokenizer(model_path)
