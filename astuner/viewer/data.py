"""What the viewer reads from a run folder: metrics.jsonl, trajectories/step_N.jsonl (episodes) and
trajectories/step_N.tokens.jsonl.gz (their samples token by token). Every path is built here from a step
number and fixed names — nothing a request names is ever opened as a path."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any, Optional

from astuner.records.tokens import read_token_records

STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")
CURVES = ("reward/mean", "reward/success_rate", "val/reward_mean", "rollout/error_rate", "rollout/madness_rate",
          "rollout/truncated_rate", "rollout/tool_parse_failures", "actor/kl", "actor/clip_frac", "actor/rollout_logprob_diff", "actor/entropy",
          "actor/grad_norm", "perf/time_step_s")


class RunData:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.trajectories = self.root / "trajectories"

    def _jsonl(self, path: Path) -> list[dict[str, Any]]:
        if not path.is_file():
            return []
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line being written by a live run
                continue
        return rows

    def steps(self) -> list[int]:
        if not self.trajectories.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.trajectories.iterdir() if (m := STEP_FILE.match(p.name)))

    def run(self) -> dict[str, Any]:
        metrics = self._jsonl(self.root / "metrics.jsonl")
        keys = [k for k in CURVES if any(k in row for row in metrics)]
        extra = sorted({k for row in metrics for k in row if k.startswith("rollout/") and k.endswith("_rate")}
                       - set(keys))
        return {"name": self.root.name, "path": str(self.root), "steps": self.steps(), "curves": keys + extra,
                "metrics": [{k: row.get(k) for k in ["step", *keys, *extra] if k in row} for row in metrics]}

    def episodes(self, step: int) -> list[dict[str, Any]]:
        return self._jsonl(self.trajectories / f"step_{int(step)}.jsonl")

    def step(self, step: int) -> Optional[dict[str, Any]]:
        rows = self.episodes(step)
        if not rows and int(step) not in self.steps():
            return None
        table, groups = [], {}
        for row in rows:
            samples = row.get("samples") or []
            table.append({"task_id": row.get("task_id"), "repeat_index": row.get("repeat_index"),
                          "episode_uuid": row.get("episode_uuid"), "reward": row.get("reward"),
                          "advantage": row.get("advantage"), "is_success": row.get("is_success"),
                          "failed": row.get("failed"), "madness": row.get("madness") or [],
                          "truncated": row.get("truncated"), "calls": row.get("calls"),
                          "tool_errors": row.get("tool_parse_failures"),
                          "tokens": sum(s.get("response_tokens", 0) for s in samples) or row.get("response_tokens")})
            groups.setdefault(str(row.get("task_id")), []).append(row.get("reward"))
        stats = {}
        for task, rewards in groups.items():
            values = [r for r in rewards if isinstance(r, (int, float))]
            stats[task] = {"n": len(rewards), "mean": statistics.fmean(values) if values else None,
                           "std": statistics.pstdev(values) if len(values) > 1 else 0.0 if values else None}
        return {"step": int(step), "episodes": table, "groups": stats}

    def episode(self, step: int, uuid: str) -> Optional[dict[str, Any]]:
        row = next((r for r in self.episodes(step) if r.get("episode_uuid") == uuid), None)
        if row is None:
            return None
        path = self.trajectories / f"step_{int(step)}.tokens.jsonl.gz"
        samples = []
        if path.is_file():
            try:
                samples = [r for r in read_token_records(path) if r.get("episode_uuid") == uuid]
            except (OSError, EOFError, json.JSONDecodeError):
                samples = []
        return {"step": int(step), "episode": row, "samples": sorted(samples, key=lambda r: r.get("sample", 0))}
