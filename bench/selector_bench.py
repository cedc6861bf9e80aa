"""random vs difficulty_based (BOTS) task selection on the tiny CPU digit task: steps until the training
reward (10-step moving average) reaches a threshold, per seed, measured side by side in one run.

    python bench/selector_bench.py [--seeds 0 1 2] [--threshold 0.8] [--out /tmp/astuner_selector_bench]

1. trains the tiny demo for 100 steps: its checkpoint is the stronger reference model, the untrained tiny
   model the weaker one;
2. tutorial/example_data_augment/prepare_data.py adds both models' pass rates to the training rows;
3. runs config_random.yaml and config_difficulty.yaml (they differ only in the selector) from the
   untrained model for each seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
AUG = ROOT / "tutorial" / "example_data_augment"


def astuner(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "astuner", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"astuner {' '.join(args)} failed:\n{proc.stderr[-3000:]}")


def steps_to(rewards: list[float], threshold: float, window: int = 10) -> Optional[int]:
    for i in range(window, len(rewards) + 1):
        if statistics.fmean(rewards[i - window:i]) >= threshold:
            return i
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=Path("/tmp/astuner_selector_bench"))
    args = parser.parse_args()
    out = args.out.absolute()
    init_model = out / ".models" / "tiny_seed0"
    astuner("--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", "--exp-dir", str(out), "astuner.experiment_name=reference",
            f"astuner.model.path={init_model}", "astuner.trainer_common.total_training_steps=100",
            "astuner.trainer_common.save_freq=100", "astuner.trainer_common.test_freq=-1",
            "astuner.trainer_common.val_before_train=false", "--resume")
    strong = out / "reference" / "checkpoints" / "global_step_100" / "model"
    features = out / "train_features.jsonl"
    proc = subprocess.run([sys.executable, str(AUG / "prepare_data.py"), "--conf", str(AUG / "config_difficulty.yaml"),
                           "--input", "tutorial/example_tiny_cpu/train.jsonl", "--output", str(features),
                           "--model", f"pass_rate_weak={init_model}", "--model", f"pass_rate_strong={strong}"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    print(proc.stdout.strip())
    results = []
    for seed in args.seeds:
        for kind in ("random", "difficulty"):
            name = f"{kind}_seed{seed}"
            started = time.perf_counter()
            astuner("--conf", str(AUG / f"config_{kind}.yaml"), "--exp-dir", str(out), f"astuner.experiment_name={name}",
                    f"astuner.model.path={init_model}", f"astuner.task_reader.dataset_file.training.file_path={features}",
                    f"astuner.task_reader.task_selector.seed={seed}", f"astuner.rollout.seed={seed}",
                    f"astuner.trainer_common.seed={seed}", "--resume")
            rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
            rewards = [r["reward/mean"] for r in rows if r.get("reward/mean") is not None]
            vals = [r["val/reward_mean"] for r in rows if r.get("val/reward_mean") is not None]
            results.append((kind, seed, steps_to(rewards, args.threshold), vals[-1], time.perf_counter() - started))
    print(f"| selector | seed | steps to train reward >= {args.threshold} (10-step mean) | final val reward | wall time |")
    print("| --- | --- | --- | --- | --- |")
    for kind, seed, steps, val, secs in results:
        print(f"| {kind} | {seed} | {steps if steps is not None else 'not reached'} | {val:.3f} | {secs:.0f} s |")
    for kind in ("random", "difficulty"):
        reached = [s for k, _, s, _, _ in results if k == kind and s is not None]
        print(f"{kind}: reached in {len(reached)}/{len(args.seeds)} seeds, mean steps "
              f"{statistics.fmean(reached):.0f}" if reached else f"{kind}: threshold not reached")


if __name__ == "__main__":
    main()
