"""Off-policy against synchronous training on the CPU: the main job (the tool-using sensor agent, its warm start, its
GRPO) with a `read_sensor` tool whose latency is long-tailed, as a real tool's or environment's is: lognormal,
mean 0.3 s, p99 about 3.2 s, drawn per episode from the episode's id (the same episodes wait the same time in every
run). Per seed, the same config synchronous (max_staleness 0) and with each max_staleness asked for (on_stale wait).

    python bench/async_vs_sync.py [--seeds 0 1 2] [--steps 120] [--ks 1] [--exp-dir /tmp/astuner_async_bench]

Per run: its RL wall time (after the warm start, which is the same in every run of a seed), the wall time until its
own validation first reached the seed's target — the synchronous run's final validation less 0.05, the synchronous
run measured the same way — and the final weights evaluated by `astuner eval` (each model's reward with its 95%
bootstrap interval over the validation tasks, and the off-policy less the synchronous one, paired task by task).
The last line: the mean over seeds of the off-policy run's time to the target over the synchronous run's, and
whether its final evaluation is within 0.05 of the synchronous one on every seed:
`async/sync wall-time ratio: X (final a vs s, within 0.05 on every seed: yes|no)`. Goal: X <= 0.6 and yes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from agentscope.message import TextBlock
from agentscope.tool import ToolResponse, Toolkit

from astuner import WorkflowTask

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tutorial" / "example_agent_cpu"))
from sensor_agent import SensorWorkflow  # noqa: E402  the main job's agent

CONF = "tutorial/example_agent_cpu/sensor_agent.yaml"
MEAN_S, SIGMA = 0.3, 1.5  # lognormal: mean exp(mu + sigma^2 / 2) = 0.3 s; p99 exp(mu + 2.326 sigma) = 3.2 s
MU = math.log(MEAN_S) - SIGMA ** 2 / 2
TOLERANCE = 0.05
GOAL = 0.6


class SlowSensorWorkflow(SensorWorkflow):
    """The main job's agent (tutorial/example_agent_cpu/sensor_agent.py) with a tool that takes its time."""

    def toolkit(self, workflow_task: WorkflowTask) -> Toolkit:
        reading = workflow_task.task.metadata["reading"]
        latency = random.Random(workflow_task.episode_uuid).lognormvariate(MU, SIGMA)

        async def read_sensor() -> ToolResponse:
            """Read the sensor the user asks about."""
            await asyncio.sleep(latency)
            return ToolResponse(content=[TextBlock(type="text", text=str(reading))])

        toolkit = Toolkit()
        toolkit.register_tool_function(read_sensor)
        return toolkit


def overrides(seed: int, exp_dir: Path) -> list[str]:
    return [f"astuner.trainer_common.seed={seed}", f"astuner.model.path={exp_dir}/.models/sensor_seed{seed}",
            f"astuner.rollout.agentscope_workflow={Path(__file__).resolve()}->SlowSensorWorkflow"]


def run(seed: int, k: int, steps: int, exp_dir: Path) -> dict:
    # one experiment name in a folder per run: the same episode ids, so the same tool latencies, in every run of a seed
    name, folder = "sensor", exp_dir / f"seed{seed}" / f"max_staleness_{k}"
    args = [sys.executable, "-m", "astuner", "--conf", CONF, "--exp-dir", str(folder), f"astuner.experiment_name={name}",
            *overrides(seed, exp_dir), f"astuner.trainer_common.total_training_steps={steps}",
            "astuner.trainer_common.save_freq=-1", f"astuner.trainer_common.off_policy.max_staleness={k}"]
    shutil.rmtree(folder / name, ignore_errors=True)
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed}, max_staleness {k} failed:\n{proc.stderr[-4000:]}")
    rows = [json.loads(line) for line in (folder / name / "metrics.jsonl").read_text().splitlines()]
    val = [(r["step"], r["perf/elapsed_s"], r["val/reward_mean"]) for r in rows if r["step"] > 0 and
           "val/reward_mean" in r]
    lags = [r.get("off_policy/lag_mean", 0.0) for r in rows if r["step"] > 0]
    return {"seed": seed, "k": k, "rl_s": rows[-1]["perf/elapsed_s"], "val": val, "final": val[-1][2],
            "lag": statistics.fmean(lags), "checkpoint": folder / name / "checkpoints" / f"global_step_{steps}"}


def evaluate(seed: int, runs: list[dict], exp_dir: Path) -> dict:
    """`astuner eval` of the runs' final weights on the validation tasks: each one's reward with its interval, and
    each off-policy one less the synchronous one, paired task by task."""
    out = exp_dir / f"seed{seed}" / "eval"
    shutil.rmtree(out, ignore_errors=True)
    args = [sys.executable, "-m", "astuner", "eval", "--conf", CONF, "--out", str(out),
            *[a for r in runs for a in ("--model", f"label=max_staleness_{r['k']},path={r['checkpoint']}")],
            *overrides(seed, exp_dir)]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed}: astuner eval failed:\n{proc.stderr[-4000:]}")
    return json.loads((out / "eval.json").read_text())


def reached(result: dict, target: float) -> float | None:
    return next((elapsed for _, elapsed, value in result["val"] if value >= target), None)


def interval(value: dict, signed: bool = False) -> str:
    low, high = value["ci95"]
    form = "+.3f" if signed else ".3f"
    return f"{value['mean']:{form}} [{low:{form}}, {high:{form}}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--ks", type=int, nargs="+", default=[1])
    parser.add_argument("--exp-dir", type=Path, default=Path("/tmp/astuner_async_bench"))
    args = parser.parse_args()
    print(f"tool latency: lognormal, mean {MEAN_S} s, p99 {math.exp(MU + 2.326 * SIGMA):.1f} s; {args.steps} steps; "
          f"seeds {args.seeds}; target: each seed's synchronous final validation less {TOLERANCE}", flush=True)
    print("| seed | max_staleness | RL wall time | time to the target | final validation | final eval [95%] | "
          "eval − sync [95%] | mean lag | validations |", flush=True)
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    ratios: dict[int, list[float]] = {k: [] for k in args.ks}
    within: dict[int, bool] = {k: True for k in args.ks}
    for seed in args.seeds:
        runs = [run(seed, k, args.steps, args.exp_dir) for k in [0, *args.ks]]
        result = evaluate(seed, runs, args.exp_dir)
        # the models in the order given; the differences pair them (0, 1), (0, 2), ...: each one less the synchronous
        models, differences = result["models"], [None, *result["differences"][:len(runs) - 1]]
        target = runs[0]["final"] - TOLERANCE
        base = reached(runs[0], target)
        for r, model, diff in zip(runs, models, differences):
            at = reached(r, target)
            if r["k"]:
                ratios[r["k"]].append(at / base if at is not None else math.inf)
                within[r["k"]] &= abs(diff["reward"]["mean"]) <= TOLERANCE
            curve = " ".join(f"{step}:{value:.2f}" for step, _, value in r["val"])
            print(f"| {seed} | {r['k']} | {r['rl_s']:.0f} s | {'never' if at is None else f'{at:.0f} s'} | "
                  f"{r['final']:.3f} | {interval(model['reward'])} | {interval(diff['reward'], True) if diff else '-'} | "
                  f"{r['lag']:.2f} | {curve} |", flush=True)
    for k in args.ks:
        mean = statistics.fmean(ratios[k])
        print(f"max_staleness {k}: time to the target {mean:.2f}x the synchronous run's (per seed: "
              f"{', '.join(f'{x:.2f}' for x in ratios[k])}); final evaluation within {TOLERANCE} of the synchronous "
              f"one on every seed: {'yes' if within[k] else 'no'}")
    best = min(args.ks, key=lambda k: statistics.fmean(ratios[k]))
    ratio = statistics.fmean(ratios[best])
    print(f"goal: ratio <= {GOAL} and within {TOLERANCE} on every seed; best: max_staleness {best}")
    print(f"async/sync wall-time ratio: {ratio:.2f} (final a vs s, within {TOLERANCE} on every seed: "
          f"{'yes' if within[best] else 'no'})")


if __name__ == "__main__":
    main()
