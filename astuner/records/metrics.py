"""Step records: metrics.jsonl (one line per step), tensorboard scalars, trajectories/step_N.jsonl,
and a reward-curve PNG at the end."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Optional

from loguru import logger


class MetricsWriter:
    def __init__(self, root: Path, tensorboard_dir: Optional[Path] = None, tensorboard: bool = True,
                 monitors: Optional[list[Any]] = None):
        self.path = root / "metrics.jsonl"
        self.monitors = list(monitors or [])  # astuner.records.monitors: wandb, swanlab, mlflow
        tensorboard_dir = tensorboard_dir or root / "tensorboard"
        self.tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(tensorboard_dir))
            except ImportError as exc:  # tensorboard is a dependency; keep running without it if broken
                logger.warning(f"tensorboard scalars disabled: {exc}")
        from astuner.interrupts import remember_closer

        remember_closer(self.close)  # a second Ctrl-C still lets the trackers write their last step

    def write(self, step: int, metrics: dict[str, float]) -> None:
        """One step's row into metrics.jsonl, tensorboard and every tracker; a Ctrl-C or SIGTERM arriving
        meanwhile is handled after the row is in all of them."""
        from astuner.interrupts import held_signals

        clean = {k: (float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None)
                 for k, v in sorted(metrics.items())}
        with held_signals():
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"step": step, **clean}) + "\n")
            if self.tb is not None:
                for key, value in clean.items():
                    if value is not None:
                        self.tb.add_scalar(key, value, step)
                self.tb.flush()
            scalars = {k: v for k, v in clean.items() if v is not None}
            for monitor in self.monitors:
                monitor.log(step, scalars)

    def history(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines of steps after the checkpoint (they will be run again)."""
        kept = [row for row in self.history() if row["step"] <= step]
        self.path.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")

    def close(self) -> None:
        """Finish every tracker (each one even if another fails); once, however often it is called (a second
        Ctrl-C's `interrupts.stop_at_once` calls it too)."""
        from astuner.interrupts import forget_closer

        closers = ([self.tb.close] if self.tb is not None else []) + [m.close for m in self.monitors]
        self.tb, self.monitors = None, []
        interrupted: Optional[BaseException] = None
        for close in closers:  # each one, even when another fails or a signal arrives meanwhile
            try:
                close()
            except Exception as exc:  # a tracker failing to close loses nothing of metrics.jsonl
                logger.warning(f"{getattr(close, '__self__', close).__class__.__name__} did not close cleanly: {exc}")
            except BaseException as exc:  # Ctrl-C / SIGTERM: the other trackers still close, then it goes on
                interrupted = interrupted or exc
        forget_closer(self.close)
        if interrupted is not None:
            raise interrupted


def write_trajectories(folder: Path, step: int, rows: Iterable[dict[str, Any]]) -> Optional[Path]:
    rows = list(rows)
    if not rows:
        return None
    path = folder / f"step_{step}.jsonl"
    partial = path.with_name(path.name + ".partial")  # renamed when whole: a live viewer never reads half
    with open(partial, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    os.replace(partial, path)
    return path


def plot_reward_curve(history: list[dict[str, Any]], path: Path, title: str) -> Optional[Path]:
    rows = [r for r in history if r.get("reward/mean") is not None]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in rows], [r["reward/mean"] for r in rows], label="train reward/mean")
    val = [r for r in history if r.get("val/reward_mean") is not None]
    if val:
        ax.plot([r["step"] for r in val], [r["val/reward_mean"] for r in val], "o-", label="val/reward_mean")
    before = [r for r in history if r.get("sft/val_reward_before") is not None]  # step 0, before the warm start
    if before:
        ax.plot([r["step"] for r in before], [r["sft/val_reward_before"] for r in before], "x", markersize=9,
                label="val before the warm start")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    partial = path.with_name(f".{path.name}.partial")  # replaced whole: a failed write leaves the last curve
    try:
        fig.savefig(partial, dpi=100, format="png")
        os.replace(partial, path)
    finally:
        plt.close(fig)
        partial.unlink(missing_ok=True)
    return path
