"""The closing lines of a run that ended: its last and best validation, where its checkpoint and reward curve are,
and what to type next (read from the run folder, whichever backbone wrote it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from astuner.records.run_dir import RunDir


def _rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line cut by a crash: the others still say what the run did
            continue
    return rows


def _last_checkpoint(run: RunDir) -> Optional[Path]:
    steps = [(int(m.group(1)), p) for p in run.checkpoints.glob("global_step_*")
             if (m := re.fullmatch(r"global_step_(\d+)", p.name)) and p.is_dir()]
    return max(steps)[1] if steps else None


def closing_lines(run: RunDir, conf: Optional[Path] = None) -> list[str]:
    """What the run did and what to do next, a line each."""
    rows = _rows(run.root / "metrics.jsonl")
    steps = [r for r in rows if isinstance(r.get("step"), int) and r["step"] > 0]
    validated = [(r["step"], r["val/reward_mean"]) for r in rows if isinstance(r.get("val/reward_mean"), (int, float))]
    lines = []
    if steps or validated:
        done = f"{steps[-1]['step']} training steps" if steps else "no training step"
        if validated:
            best = max(validated, key=lambda sv: (sv[1], -sv[0]))
            done += (f"; validation reward {validated[-1][1]:.3f} at step {validated[-1][0]} (the last), best "
                     f"{best[1]:.3f} at step {best[0]}")
        lines.append(f"run finished: {done}")
    checkpoint = _last_checkpoint(run)
    curve = run.root / "reward_curve.png"
    where = [f"checkpoint {checkpoint}" if checkpoint else "", f"reward curve {curve}" if curve.is_file() else "",
             f"metrics {run.root / 'metrics.jsonl'}"]
    lines.append("in the run folder: " + ", ".join(w for w in where if w))
    nexts = [f"astuner view {run.root}"]
    if checkpoint is not None:
        nexts.append(f"astuner chat {checkpoint}")
        if conf is not None:
            nexts.append(f"astuner eval --conf {conf} --model {checkpoint}")
    lines.append("next: " + "  |  ".join(nexts))
    return lines
