"""The main job's learning bar (P4): the tool-using sensor agent, over 3 seeds, reaches a sampled validation
reward of at least BAR within 5 minutes on this machine, counted from the command's start (the tiny model's
creation, the SFT warm start and the GRPO steps included).

    python bench/agent_cpu_seeds.py [--seeds 0 1 2] [--bar 0.8] [--exp-dir /tmp/astuner_agent_bench]

Each seed changes the tiny model's initial weights, the sampling seed, the data order and torch's seed. Each run
is the README's main command (tutorial/example_agent_cpu/sensor_agent.yaml) with those seeds set; the time of a
validation is when its log line appears. Prints one row per seed (reward before SFT, after SFT, after RL, minutes
to the bar) and the verdict; exits 1 when a seed misses the bar or the 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = "tutorial/example_agent_cpu/sensor_agent.yaml"
VALIDATION = re.compile(r"validation at step (\d+): reward ([0-9.]+)")
LIMIT_S = 300


def run(seed: int, exp_dir: Path, bar: float) -> dict:
    name = f"sensor_agent_seed{seed}"
    args = [sys.executable, "-m", "astuner", "--conf", CONF, "--exp-dir", str(exp_dir),
            f"astuner.experiment_name={name}", f"astuner.model.path={exp_dir}/.models/{name}",
            f"astuner.model.tiny.seed={seed}", f"astuner.rollout.seed={seed}",
            f"astuner.trainer_common.seed={seed}", f"astuner.task_reader.task_selector.seed={seed}"]
    for old in (exp_dir / name, exp_dir / ".models" / name):  # a fresh run and model each time, as a newcomer's
        shutil.rmtree(old, ignore_errors=True)
    started = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[tuple[int, float, float]] = []  # (step, reward, seconds since start)
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        found = VALIDATION.search(line)
        if found:
            seen.append((int(found[1]), float(found[2]), time.perf_counter() - started))
    elapsed = time.perf_counter() - started
    if proc.wait() != 0:
        raise SystemExit(f"seed {seed} failed:\n{''.join(tail)}")
    rows = [json.loads(line) for line in (exp_dir / name / "metrics.jsonl").read_text().splitlines()]
    first = rows[0]
    reached = next(((step, s) for step, reward, s in seen[1:] if reward >= bar), None)  # seen[0]: before SFT
    rewards = [r["reward/mean"] for r in rows if r["step"] > 0]
    return {"seed": seed, "before_sft": first["sft/val_reward_before"], "after_sft": first["val/reward_mean"],
            "after_rl": rows[-1].get("val/reward_mean", float("nan")), "sft_s": first["perf/time_sft_s"],
            "train_first": sum(rewards[:6]) / 6, "train_last": sum(rewards[-6:]) / 6,
            "bar_step": reached[0] if reached else None, "bar_s": reached[1] if reached else None,
            "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--bar", type=float, default=0.8)
    parser.add_argument("--exp-dir", type=Path, default=Path("/tmp/astuner_agent_bench"))
    args = parser.parse_args()
    results = [run(seed, args.exp_dir, args.bar) for seed in args.seeds]
    print(f"validation: sampled (temperature 1.0), 4 episodes per task, 40 tasks; bar {args.bar}")
    print("| seed | val before SFT | val after SFT | val after RL | train reward, first -> last 6 steps | "
          "SFT time | bar reached | whole run |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        bar = f"step {r['bar_step']}, {r['bar_s'] / 60:.1f} min" if r["bar_s"] is not None else "not reached"
        print(f"| {r['seed']} | {r['before_sft']:.3f} | {r['after_sft']:.3f} | {r['after_rl']:.3f} | "
              f"{r['train_first']:.3f} -> {r['train_last']:.3f} | {r['sft_s']:.0f} s | {bar} | "
              f"{r['seconds'] / 60:.1f} min |")
    ok = all(r["bar_s"] is not None and r["bar_s"] <= LIMIT_S for r in results)
    print(f"bar (val >= {args.bar} within {LIMIT_S // 60} min, every seed): {'met' if ok else 'MISSED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
