"""Several policies on the trinity backbone: its per-policy reward curves against the debug backbone's, and two
policies' trainer memory and step time against one's.

The signal game as LoRA adapters of one tiny base (tutorial/example_multi_agent_cpu/signal_game_lora.yaml), per
seed (the tiny model's): on debug and on Trinity's CPU mode with its two learning policies, and on Trinity with one
learning policy for both agents (`team`: one adapter trains on the same samples).

- Curves: each policy's training reward per episode, over the run's last third of steps, on debug and on Trinity,
  with bootstrap 95% intervals over the episodes (Trinity's explorer step t is the debug backbone's step t: both
  sample step t on the weights of step t - 1). On this random tiny model the adapters (on the linear layers vLLM
  serves them on) barely move the output, so both stay near chance: the comparison says the two backbones sample
  and reward the same game alike, not that they learn alike.
- Cost: the peak resident memory of Trinity's FSDP trainer worker (the `ray::WorkerDict` process, sampled every
  0.2 s) and the mean of Trinity's `time/train_step` after the first step, two policies over one.

    python bench/trinity_policies.py [--seeds 0 1] [--steps 15]    # in the trinity environment (.venv-trinity)

The last line states both goals over the seeds: every policy's interval on Trinity overlaps its interval on debug,
and the ratios against the goal set for a GPU (memory <= 1.15x, step time <= 1.25x; here the CPU's figures)."""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers import scalars  # noqa: E402

GAME = REPO / "tutorial" / "example_multi_agent_cpu" / "signal_game_lora.yaml"
POLICIES = ("hinter", "guesser")


def config(tmp: Path, seed: int, several: bool) -> Path:
    conf = yaml.safe_load(GAME.read_text())
    a = conf["astuner"]
    a["model"]["path"] = str(tmp / f"model{seed}")
    a["model"]["tiny"]["seed"] = seed
    if not several:  # one learning policy for both agents: the same samples trained, on one adapter
        a["policies"] = {"team": {}, "noise": {"trainable": False}}
        a["rollout"]["agent_policy"] = {"hinter": "team", "guesser": "team", "noise*": "noise"}
    path = tmp / f"{'two' if several else 'one'}_{seed}.yaml"
    path.write_text(yaml.safe_dump(conf))
    return path


def peak_worker_memory(stop: threading.Event, peak: list[int]) -> None:
    import psutil

    while not stop.is_set():
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any("WorkerDict" in part for part in proc.info["cmdline"] or []):
                    peak[0] = max(peak[0], proc.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.2)


def run(conf: Path, tmp: Path, name: str, steps: int, backbone: str) -> tuple[Path, float]:
    """The run folder and the peak trainer-worker memory (MiB; 0 on debug)."""
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=peak_worker_memory, args=(stop, peak), daemon=True)
    sampler.start()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    ray = ["--with-ray"] if backbone != "debug" else []
    proc = subprocess.run(
        [sys.executable, "-m", "astuner", "--conf", str(conf), "--backbone", backbone, *ray, "--exp-dir",
         str(tmp / "runs"), f"astuner.experiment_name={name}", f"astuner.trainer_common.total_training_steps={steps}",
         "astuner.trainer_common.save_freq=-1", "astuner.trainer_common.test_freq=-1",
         "astuner.trainer_common.val_before_train=false"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    return tmp / "runs" / name, peak[0] / 2**20


def debug_rewards(root: Path) -> dict[tuple[int, str], list[float]]:
    """(step, policy) -> each episode's reward of that policy (the debug backbone's trajectory records)."""
    out: dict[tuple[int, str], list[float]] = defaultdict(list)
    for path in (root / "trajectories").glob("step_*.jsonl"):
        step = int(path.stem.split("_")[1])
        for line in path.read_text().splitlines():
            for policy, reward in json.loads(line)["rewards"].items():
                out[(step, policy)].append(float(reward))
    return out


def trinity_rewards(root: Path) -> dict[tuple[int, str], list[float]]:
    """(step, policy) -> each episode's reward of that policy (the experiences Trinity's explorer wrote; step t
    sampled on model version t - 1)."""
    from trinity.common.experience import Experience

    with sqlite3.connect(root / "trajectories" / "explorer_output.db") as conn:
        rows = conn.execute("SELECT b.experience_bytes FROM pipeline_input e JOIN pipeline_input_blob b "
                            "ON e.id = b.id").fetchall()
    episodes: dict[tuple[int, str, str], float] = {}
    for (blob,) in rows:
        exp = Experience.deserialize(blob)
        if exp.eid.suffix in POLICIES:
            episodes[(exp.info["model_version"] + 1, exp.eid.suffix, exp.info["episode_uuid"])] = float(exp.reward)
    out: dict[tuple[int, str], list[float]] = defaultdict(list)
    for (step, policy, _), reward in episodes.items():
        out[(step, policy)].append(reward)
    return out


def interval(values: list[float], seed: int = 0, resamples: int = 2000) -> tuple[float, float, float]:
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.fmean(values), means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def window(rewards: dict[tuple[int, str], list[float]], policy: str, first: int, last: int) -> list[float]:
    return [r for step in range(first, last + 1) for r in rewards.get((step, policy), [])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()
    first = args.steps - args.steps // 3 + 1
    memory, step_time, overlaps, lines = [], [], [], []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for seed in args.seeds:
            two = config(tmp, seed, True)
            debug_root, _ = run(two, tmp, f"debug_{seed}", args.steps, "debug")
            two_root, two_peak = run(two, tmp, f"two_{seed}", args.steps, "trinity")
            one_root, one_peak = run(config(tmp, seed, False), tmp, f"one_{seed}", args.steps, "trinity")
            times = [statistics.fmean(v for s, v in scalars(root / "tensorboard" / "trainer")["time/train_step"].items()
                                      if s > 1) for root in (one_root, two_root)]
            memory.append(two_peak / one_peak)
            step_time.append(times[1] / times[0])
            print(f"seed {seed}: trainer worker one policy {one_peak:.0f} MiB, {times[0]:.2f} s/step; two policies "
                  f"{two_peak:.0f} MiB, {times[1]:.2f} s/step", flush=True)
            ours, theirs = debug_rewards(debug_root), trinity_rewards(two_root)
            for policy in POLICIES:
                d = interval(window(ours, policy, first, args.steps), seed)
                t = interval(window(theirs, policy, first, args.steps), seed)
                overlaps.append(d[1] <= t[2] and t[1] <= d[2])
                start = [statistics.fmean(window(r, policy, 1, args.steps // 3)) for r in (ours, theirs)]
                line = (f"{policy} seed {seed}: steps 1-{args.steps // 3} debug {start[0]:.3f}, trinity {start[1]:.3f}; "
                        f"steps {first}-{args.steps} debug {d[0]:.3f} [{d[1]:.3f}, {d[2]:.3f}], trinity {t[0]:.3f} "
                        f"[{t[1]:.3f}, {t[2]:.3f}]")
                lines.append(line)
                print(line, flush=True)
    met = all(overlaps)
    print(f"{len(args.seeds)} seeds, {args.steps} steps: per-policy reward over steps {first}-{args.steps} on trinity "
          f"within debug's 95% interval (overlapping) for {sum(overlaps)} of {len(overlaps)} policy-seeds "
          f"({'met' if met else 'not met'}); two policies / one on trinity: trainer peak memory "
          f"{statistics.fmean(memory):.3f}x (max {max(memory):.3f}), step time {statistics.fmean(step_time):.3f}x "
          f"(max {max(step_time):.3f}) against the GPU goal of <= 1.15x and <= 1.25x "
          f"({'met' if max(memory) <= 1.15 and max(step_time) <= 1.25 else 'not met'} on this CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
