"""Off-policy against synchronous training on the CPU: the main job (the tool-using sensor agent, its warm start, its
GRPO) with a `read_sensor` tool whose latency is long-tailed, as a real tool's or environment's is: lognormal,
mean 0.3 s, p99 about 3.2 s, drawn per episode from the episode's id (the same episodes wait the same time in every
run). The same seeds, synchronous (max_staleness 0) against max_staleness 1 and 2 (on_stale wait).

    python bench/async_vs_sync.py [--steps 120] [--ks 1 2] [--exp-dir /tmp/astuner_async_bench]

Per run: the RL phase's wall time (after the warm start, which is the same in every run), the wall time until its
validation first reached the synchronous run's final one (less 0.05: the validation moves by about that between
runs), and the final validation. The last line is the best k's ratio of the times to that validation:
`async/sync wall-time ratio: X`. Goal: the same final validation (within 0.05) in at most 0.6x the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import shutil
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


def run(k: int, steps: int, exp_dir: Path) -> dict:
    # one experiment name in a folder per run: the same episode ids, so the same tool latencies, in every run
    name, exp_dir = "sensor", exp_dir / f"max_staleness_{k}"
    args = [sys.executable, "-m", "astuner", "--conf", CONF, "--exp-dir", str(exp_dir),
            f"astuner.experiment_name={name}", f"astuner.model.path={exp_dir.parent}/.models/sensor",
            f"astuner.rollout.agentscope_workflow={Path(__file__).resolve()}->SlowSensorWorkflow",
            f"astuner.trainer_common.total_training_steps={steps}", "astuner.trainer_common.save_freq=-1",
            f"astuner.trainer_common.off_policy.max_staleness={k}"]
    shutil.rmtree(exp_dir / name, ignore_errors=True)
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"max_staleness {k} failed:\n{proc.stderr[-4000:]}")
    rows = [json.loads(line) for line in (exp_dir / name / "metrics.jsonl").read_text().splitlines()]
    val = [(r["step"], r["perf/elapsed_s"], r["val/reward_mean"]) for r in rows if r["step"] > 0 and
           "val/reward_mean" in r]
    lags = [r.get("off_policy/lag_mean", 0.0) for r in rows if r["step"] > 0]
    return {"k": k, "rl_s": rows[-1]["perf/elapsed_s"], "val": val, "final": val[-1][2], "lag": sum(lags) / len(lags)}


def reached(result: dict, target: float) -> float | None:
    return next((elapsed for _, elapsed, value in result["val"] if value >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--exp-dir", type=Path, default=Path("/tmp/astuner_async_bench"))
    args = parser.parse_args()
    results = [run(k, args.steps, args.exp_dir) for k in [0, *args.ks]]
    sync = results[0]
    target = sync["final"] - TOLERANCE
    print(f"tool latency: lognormal, mean {MEAN_S} s, p99 {math.exp(MU + 2.326 * SIGMA):.1f} s; {args.steps} steps; "
          f"target: the synchronous run's final validation {sync['final']:.3f} less {TOLERANCE}")
    print("| max_staleness | RL wall time | time to the target | final validation | mean lag | validations |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        at = reached(r, target)
        curve = " ".join(f"{step}:{value:.2f}" for step, _, value in r["val"])
        print(f"| {r['k']} | {r['rl_s']:.0f} s | {'never' if at is None else f'{at:.0f} s'} | {r['final']:.3f} | "
              f"{r['lag']:.2f} | {curve} |")
    base = reached(sync, target)
    ratios = {r["k"]: reached(r, target) / base for r in results[1:] if reached(r, target) is not None}
    for r in results[1:]:
        same = abs(r["final"] - sync["final"]) <= TOLERANCE
        to_target = f"{ratios[r['k']]:.2f}x" if r["k"] in ratios else "never reached"
        print(f"max_staleness {r['k']}: RL wall time {r['rl_s'] / sync['rl_s']:.2f}x the synchronous run's, "
              f"time to the target {to_target}, final validation {'within' if same else 'NOT within'} {TOLERANCE} "
              f"of it")
    if not ratios:
        raise SystemExit("async/sync wall-time ratio: none (no off-policy run reached the target)")
    best = min(ratios, key=ratios.get)
    print(f"best: max_staleness {best}")
    print(f"async/sync wall-time ratio: {ratios[best]:.2f}")


if __name__ == "__main__":
    main()
