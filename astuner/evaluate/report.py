"""What an evaluation reports: each model's figures (mean reward and success with their 95% intervals over tasks,
pass@k and avg@k, calls, tokens and tool-call parse failures per episode, failed episodes, wall time), each pair's
difference on the same tasks with its interval; as a table on the terminal, as `eval.json`, and the episodes as
the trajectories `astuner view` opens (model i's as step i, labelled from eval.json)."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

from astuner.evaluate.stats import interval, ks_reported, pass_at_k
from astuner.records.metrics import write_trajectories

EVAL_FILE = "eval.json"


def per_task(episodes: list[Any]) -> dict[str, list[Any]]:
    """The episodes by task, in the tasks' order."""
    out: dict[str, list[Any]] = {}
    for e in episodes:
        out.setdefault(str(e.task.task_id), []).append(e)
    return out


def figures(evaluated: Any, k: int, seed: int) -> dict[str, Any]:
    episodes = evaluated.episodes
    tasks = per_task(episodes)
    rewards = [statistics.fmean(e.reward for e in group) for group in tasks.values()]
    success = [statistics.fmean(float(e.is_success) for e in group) for group in tasks.values()]
    n = max(len(episodes), 1)
    passes = {}
    for j in ks_reported(k):
        values = [pass_at_k(len(g), sum(e.is_success for e in g), j) for g in tasks.values() if len(g) >= j]
        passes[str(j)] = statistics.fmean(values) if values else None
    calls = [c for e in episodes for c in e.recorder.calls]
    return {
        "label": evaluated.candidate.label, "model": evaluated.candidate.describe(),
        "tasks": len(tasks), "episodes": len(episodes), "k": k,
        "reward": {"mean": statistics.fmean(rewards), "ci95": list(interval(rewards, seed))},
        "success": {"mean": statistics.fmean(success), "ci95": list(interval(success, seed))},
        "pass@k": passes, f"avg@{k}": statistics.fmean(rewards),
        "per_episode": {"calls": len(calls) / n,
                        "prompt_tokens": sum(c.prompt_tokens for c in calls) / n,
                        "completion_tokens": sum(c.completion_tokens for c in calls) / n,
                        "tool_parse_failures": sum(e.tool_parse_failures for e in episodes) / n},
        "failed": sum(e.failed for e in episodes), "wall_s": evaluated.wall_s,
        "per_task": {task: {"reward": r, "success": s} for task, r, s in zip(tasks, rewards, success)},
        "notes": evaluated.notes,
    }


def difference(a: dict[str, Any], b: dict[str, Any], seed: int) -> dict[str, Any]:
    """b − a on the tasks both were evaluated on, paired task by task."""
    common = [t for t in a["per_task"] if t in b["per_task"]]
    out: dict[str, Any] = {"a": a["label"], "b": b["label"], "tasks": len(common)}
    for key in ("reward", "success"):
        mine = [b["per_task"][t][key] for t in common]
        theirs = [a["per_task"][t][key] for t in common]
        mean = statistics.fmean(x - y for x, y in zip(mine, theirs)) if common else 0.0
        low, high = interval(mine, seed, paired_with=theirs) if common else (0.0, 0.0)
        out[key] = {"mean": mean, "ci95": [low, high], "excludes_0": low > 0 or high < 0}
    return out


def report(models: list[dict[str, Any]], seed: int, meta: dict[str, Any]) -> dict[str, Any]:
    pairs = [difference(models[i], models[j], seed) for i in range(len(models)) for j in range(i + 1, len(models))]
    for step, model in enumerate(models, start=1):
        model["step"] = step  # its episodes: trajectories/step_<step>.jsonl
    return {**meta, "models": models, "differences": pairs}


def table(result: dict[str, Any]) -> str:
    """The terminal's table: a row per model, then each pair's difference."""
    models = result["models"]
    ks = list(models[0]["pass@k"]) if models else []
    head = ["model", "reward [95% CI]", "success [95% CI]", *(f"pass@{j}" for j in ks), "calls/ep", "tokens/ep",
            "parse fails/ep", "failed", "wall"]
    rows = [head]
    for m in models:
        per = m["per_episode"]
        rows.append([m["label"], _ci(m["reward"]), _ci(m["success"]),
                     *("-" if m["pass@k"][j] is None else f"{m['pass@k'][j]:.3f}" for j in ks),
                     f"{per['calls']:.2f}", f"{per['prompt_tokens'] + per['completion_tokens']:.0f}",
                     f"{per['tool_parse_failures']:.2f}", str(m["failed"]), f"{m['wall_s']:.0f}s"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for d in result["differences"]:
        r = d["reward"]
        verdict = "excludes 0" if r["excludes_0"] else "includes 0: no difference shown"
        lines.append(f"{d['b']} - {d['a']}: reward {r['mean']:+.3f} [{r['ci95'][0]:+.3f}, {r['ci95'][1]:+.3f}] "
                     f"({verdict}), success {d['success']['mean']:+.3f} over {d['tasks']} tasks")
    return "\n".join(lines)


def _ci(value: dict[str, Any]) -> str:
    return f"{value['mean']:.3f} [{value['ci95'][0]:.3f}, {value['ci95'][1]:.3f}]"


def write_episodes(out: Path, step: int, evaluated: Any) -> None:
    """Model `step`'s episodes as a run's trajectories (with its tokens where the model returned ids)."""
    from astuner.backbone.debug.step_records import write_step_trajectories
    from astuner.backbone.debug.trajectories import episode_row
    from astuner.records.tokens import TokenPieces

    folder = out / "trajectories"
    folder.mkdir(parents=True, exist_ok=True)
    if evaluated.tokenizer is None:
        write_trajectories(folder, step, [episode_row(e) for e in evaluated.episodes])
        return
    from astuner.rollout.manager import RolloutBatch

    write_step_trajectories(folder, step, RolloutBatch(evaluated.episodes, {}), len(evaluated.episodes),
                            TokenPieces(evaluated.tokenizer))


def write_report(out: Path, result: dict[str, Any]) -> Path:
    """eval.json, whole or not at all."""
    path = out / EVAL_FILE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path
