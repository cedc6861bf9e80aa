"""The embedded demo's learning bar: over 3 seeds, the mean reward of the last 10% of steps must be at
least 0.3 above that of the first 10%, each run within 5 minutes on this machine.

    python bench/tiny_cpu_seeds.py [--seeds 0 1 2] [--dtypes fp32 bf16] [--exp-dir /tmp/astuner_bench]

Each seed changes the tiny model's initial weights, the sampling seed, the data order and torch's seed;
`--dtypes` runs each seed once per precision recipe (`trainer_common.dtype`), side by side.
Prints one row per run and the verdict; exits 1 when the bar is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
CONF = "tutorial/example_tiny_cpu/tiny_cpu.yaml"


def run(seed: int, exp_dir: Path, dtype: str = "fp32", overrides: Sequence[str] = (), tag: str = "") -> dict:
    """One run of the demo (with extra config `overrides`, named by `tag`); its rewards and wall time."""
    model, name = f"tiny_cpu_seed{seed}", f"tiny_cpu_seed{seed}_{dtype}{tag}"
    args = [sys.executable, "-m", "astuner", "--conf", CONF, "--exp-dir", str(exp_dir),
            f"astuner.experiment_name={name}", f"astuner.model.path={exp_dir}/.models/{model}",
            f"astuner.trainer_common.dtype={dtype}",
            f"astuner.model.tiny.seed={seed}", f"astuner.rollout.seed={seed}",
            f"astuner.trainer_common.seed={seed}", f"astuner.task_reader.task_selector.seed={seed}", *overrides]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this run's own peak memory
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            log.seek(0)
            raise SystemExit(f"seed {seed} failed:\n{log.read()[-3000:]}")
    rows = [json.loads(line) for line in (exp_dir / name / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in rows if r["step"] > 0]
    tenth = max(len(rewards) // 10, 1)
    vals = [r["val/reward_mean"] for r in rows if r.get("val/reward_mean") is not None]
    return {"seed": seed, "dtype": dtype, "steps": len(rewards), "first": statistics.fmean(rewards[:tenth]),
            "last": statistics.fmean(rewards[-tenth:]), "val_start": vals[0], "val_end": vals[-1],
            "seconds": elapsed, "rewards": rewards, "peak_rss_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    parser.add_argument("--exp-dir", type=Path, default=Path("/tmp/astuner_bench"))
    args = parser.parse_args()
    results = [run(seed, args.exp_dir, dtype) for seed in args.seeds for dtype in args.dtypes]
    print("| seed | dtype | steps | reward, first 10% | reward, last 10% | gain | val reward start -> end | wall time |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['seed']} | {r['dtype']} | {r['steps']} | {r['first']:.3f} | {r['last']:.3f} | {r['last'] - r['first']:+.3f} | "
              f"{r['val_start']:.3f} -> {r['val_end']:.3f} | {r['seconds']:.0f} s |")
    ok = all(r["last"] - r["first"] >= 0.3 and r["seconds"] <= 300 for r in results)
    print(f"bar (gain >= 0.3 and <= 300 s for every seed): {'met' if ok else 'MISSED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
