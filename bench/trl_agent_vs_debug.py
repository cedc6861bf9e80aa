"""Multi-turn, tool-calling agent task, side by side on this CPU: astuner's debug backbone (an AgentScope
ReActAgent through `tutorial/example_agent_cpu/sensor_agent.yaml`) vs TRL's GRPOTrainer with its own
tool-calling loop (`environment_factory=` with a `read_sensor` method, use_vllm=False).

Both train the same tiny Qwen2 (built the way astuner builds `model.tiny` for that YAML) for the same
number of steps with the same tasks per step x group size, per-turn and total token budgets, number of
model calls per episode, temperature, learning rate and grad clip, and no SFT stage in the timed runs.
By default both start from one SFT warm-started checkpoint (astuner's `trainer_common.sft` run once,
its `global_step_0`), so the policy actually calls the tool on both sides; `--no-warm` starts both
from the random model. Prints the time per step of each, the ratio, the rollout / update split, and
how often each side called the tool.

    pip install -e '.[bench]'
    python bench/trl_agent_vs_debug.py [--steps 5] [--out /tmp/astuner_trl_agent_bench] [--no-warm]
                                       [--trl-gradient-checkpointing]

What TRL needs for our tokenizer: `add_response_schema` (which GRPOTrainer calls when the tokenizer has no
response parser) only knows hub chat templates by exact text, so ours is rejected; the bench sets
`tokenizer.response_template` to TRL's own Qwen3 template (`trl.chat_template_utils.qwen3_template`:
assistant header `<|im_start|>assistant\\n`, `<tool_call>{json}</tool_call>`, end `<|im_end|>`), which is
the Hermes format our ChatML template renders. GRPOTrainer then skips `add_response_schema`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "tutorial" / "example_agent_cpu"
CONF = TUTORIAL / "sensor_agent.yaml"
SEED = 0


def tutorial_settings() -> dict:
    """The run shape the tutorial YAML and workflow define (so the bench follows the task if it changes)."""
    from astuner.config import load_run_config

    a = load_run_config(CONF).astuner
    source = (TUTORIAL / "sensor_agent.py").read_text()
    found = re.search(r"max_iters\s*=\s*(\d+)", source)
    spec = importlib.util.spec_from_file_location("_sensor_agent", TUTORIAL / "sensor_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"batch": a.data.train_batch_size, "group": a.rollout.num_repeat,
            "max_turn": a.rollout.max_response_length_in_one_turn, "max_total": a.data.max_response_length,
            "lr": a.trainer_common.optim.lr, "grad_clip": a.trainer_common.optim.grad_clip or 0.0,
            "temperature": a.rollout.temperature, "max_iters": int(found.group(1)) if found else 3,
            "system_prompt": module.SYSTEM_PROMPT}


def base_model(out: Path) -> Path:
    """The tiny model exactly as astuner creates it for the YAML (model.tiny and the run's task corpus)."""
    from astuner.config import load_run_config
    from astuner.model.model_path import resolve_model_path

    target = out / "model"
    shutil.rmtree(target, ignore_errors=True)
    run = load_run_config(CONF, [f"astuner.model.path={target}"])
    return Path(resolve_model_path(run.astuner, run.extra_roots))


def astuner_cli(out: Path, name: str, overrides: list[str]) -> list[dict]:
    from astuner.cli import main

    shutil.rmtree(out / name, ignore_errors=True)
    code = main(["--conf", str(CONF), "--exp-dir", str(out), f"astuner.experiment_name={name}",
                 "astuner.trainer_common.test_freq=-1", "astuner.trainer_common.val_before_train=false",
                 "astuner.trainer_common.save_freq=-1", *overrides])
    if code != 0:
        raise SystemExit(f"astuner run {name} failed with exit code {code}")
    return [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]


def warm_start(model: Path, out: Path) -> tuple[Path, float]:
    """The tutorial's own SFT warm start (trainer_common.sft as the YAML sets it), one GRPO step after it;
    its checkpoint global_step_0 is the warm-started policy (a plain save_pretrained folder)."""
    t0 = time.perf_counter()
    astuner_cli(out, "warm", [f"astuner.model.path={model}", "astuner.trainer_common.total_training_steps=1"])
    return out / "warm" / "checkpoints" / "global_step_0" / "model", time.perf_counter() - t0


def run_astuner(model: Path, out: Path, steps: int, s: dict) -> list[dict]:
    return astuner_cli(out, "astuner", [
        f"astuner.model.path={model}", f"astuner.trainer_common.total_training_steps={steps}",
        "astuner.trainer_common.sft.steps=0",
        f"astuner.data.train_batch_size={s['batch']}", f"astuner.rollout.num_repeat={s['group']}",
        f"astuner.rollout.max_response_length_in_one_turn={s['max_turn']}",
        f"astuner.data.max_response_length={s['max_total']}", f"astuner.trainer_common.optim.lr={s['lr']}",
        "astuner.trainer_common.optim.weight_decay=0.0", "astuner.trainer_common.algorithm.entropy_coeff=0.0",
        # one optimizer step per batch at a constant lr, as TRL's config below
        "astuner.trainer_common.mini_batch_num=1", "astuner.trainer_common.optim.warmup_steps=0",
        # TRL updates on every group, all-zero-reward ones included (zero advantage); so does astuner here
        "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"])


class SensorEnv:
    """TRL environment: one instance per rollout; `reset` gets the dataset row, public methods are the tools."""

    def reset(self, reading, **_):
        self.reading = reading

    def read_sensor(self):
        """Read the sensor the user asks about."""
        return str(self.reading)


def last_boxed(text: str):
    found = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return found[-1].strip() if found else None


def same_number(predicted: str | None, truth) -> bool:
    if predicted is None:
        return False
    try:
        return float(predicted) == float(truth)
    except ValueError:
        return predicted == str(truth).strip()


def sensor_reward(completions, reading, **_):
    """1 when the last \\boxed{} of the model's turns equals the tool's reading."""
    out = []
    for completion, truth in zip(completions, reading):
        text = "\n".join(m.get("content") or "" for m in completion if m["role"] == "assistant")
        out.append(1.0 if same_number(last_boxed(text), truth) else 0.0)
    return out


def run_trl(model: Path, out: Path, steps: int, s: dict, gradient_checkpointing: bool = False
            ) -> tuple[list[dict], list[float], dict]:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    rows = [json.loads(line) for line in (TUTORIAL / "train.jsonl").read_text().splitlines()]
    dataset = Dataset.from_list([{"prompt": [{"role": "system", "content": s["system_prompt"]},
                                             {"role": "user", "content": r["question"]}],
                                  "reading": r["reading"]} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(model)
    # Our ChatML + Hermes template is not one TRL recognises by text; its Qwen3 response template parses the
    # same <tool_call>{json}</tool_call> format (GRPOTrainer skips add_response_schema when one is set).
    tokenizer.response_template = qwen3_template

    times: list[float] = []
    parts = {"generate_s": [], "generate_and_score_s": []}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t)

    class TimedGRPOTrainer(GRPOTrainer):
        """Timing only: wraps the rollout (generation + tool loop) and rollout+scoring, behaviour unchanged."""

        def _generate(self, prompts):
            t = time.perf_counter()
            result = super()._generate(prompts)
            parts["generate_s"].append(time.perf_counter() - t)
            _, completion_ids, tool_mask, completions = result[:4]
            for ids, mask, messages in zip(completion_ids, tool_mask or [], completions):
                if "example" not in parts and any(m["role"] == "tool" for m in messages):
                    parts["example"] = {"messages": messages, "tokens": len(ids), "masked_tool_tokens": mask.count(0)}
            return result

        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            result = super()._generate_and_score_completions(inputs)
            parts["generate_and_score_s"].append(time.perf_counter() - t)
            return result

    config = GRPOConfig(
        output_dir=str(out / "trl"), max_steps=steps, learning_rate=s["lr"], lr_scheduler_type="constant",
        weight_decay=0.0, per_device_train_batch_size=s["batch"] * s["group"], gradient_accumulation_steps=1,
        num_generations=s["group"],
        max_completion_length=s["max_total"],  # all turns + tool results, like data.max_response_length
        generation_kwargs={"max_new_tokens": s["max_turn"]},  # per model call, like max_response_length_in_one_turn
        max_tool_calling_iterations=s["max_iters"] - 1,  # ReActAgent(max_iters) = that many model calls
        temperature=s["temperature"], top_p=1.0, beta=0.0, epsilon=0.2, num_iterations=1, loss_type="dapo",
        use_vllm=False, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", report_to=[], seed=SEED,
        max_grad_norm=s["grad_clip"], disable_tqdm=True, log_completions=False,
        # TRL's configs default to gradient checkpointing (recomputes activations in backward); astuner's debug
        # backbone does not checkpoint, so the fair default here is off (--trl-gradient-checkpointing: TRL's default)
        gradient_checkpointing=gradient_checkpointing)
    trainer = TimedGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model), reward_funcs=sensor_reward,
                               args=config, train_dataset=dataset, processing_class=tokenizer,
                               environment_factory=SensorEnv, callbacks=[Timer()])
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return logs, times, parts


def med(values: list[float], skip: int = 1) -> float:
    """Median without the first step (warm-up on both sides), unless that leaves nothing."""
    return statistics.median(values[skip:] if len(values) > skip else values)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("/tmp/astuner_trl_agent_bench"))
    parser.add_argument("--no-warm", action="store_true", help="start both from the random tiny model")
    parser.add_argument("--trl-gradient-checkpointing", action="store_true",
                        help="keep TRL's default gradient_checkpointing=True (off by default: astuner does not use it)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    s = tutorial_settings()
    model = base_model(args.out)
    warm_s = None
    if not args.no_warm:
        model, warm_s = warm_start(model, args.out)
    # CPU seconds of this process (all its threads) per run: less sensitive than wall time to other processes
    # sharing the cores; each run's setup (model load, trainer init, final save) is included on both sides
    load_before, c0 = loadavg(), time.process_time()
    ours = run_astuner(model, args.out, args.steps, s)
    load_mid, c1 = loadavg(), time.process_time()
    theirs, their_times, parts = run_trl(model, args.out, args.steps, s, args.trl_gradient_checkpointing)
    load_after, c2 = loadavg(), time.process_time()
    our_cpu, their_cpu = (c1 - c0) / args.steps, (c2 - c1) / args.steps

    our_step = med([r["perf/time_step_s"] for r in ours])
    our_rollout = med([r["perf/time_rollout_s"] for r in ours])
    our_update = med([r["perf/time_update_s"] + r["perf/time_weight_sync_s"] for r in ours])
    their_step = med(their_times)
    their_gen = med(parts["generate_s"])
    their_gen_score = med(parts["generate_and_score_s"])
    their_update = med([t - g for t, g in zip(their_times, parts["generate_and_score_s"])])

    print(f"\nsetup: tiny Qwen2 from {CONF.relative_to(ROOT)} ({'SFT warm start, ' if warm_s else 'random, '}"
          f"{model}), {s['batch']} tasks x {s['group']} episodes per step, <= {s['max_iters']} model calls per "
          f"episode, {s['max_turn']} new tokens per call, {s['max_total']} per episode, lr {s['lr']}, "
          f"{args.steps} steps, CPU x{os.cpu_count()}, torch threads {__import__('torch').get_num_threads()}, "
          f"{sys.platform}")
    if warm_s:
        print(f"warm start (astuner SFT, untimed for the comparison): {warm_s:.0f} s")
    print(f"load average (1/5/15 min): before astuner {load_before} | before TRL {load_mid} | after {load_after}")
    print("| trainer | median step (wall) | CPU s / step (whole run) | rollout (generation+tools) | scoring etc. "
          "| update | tool calls / episode | model tokens / episode | reward |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    calls = statistics.fmean(r["rollout/calls_per_episode"] for r in ours)
    print(f"| astuner debug backbone | {our_step:.2f} s | {our_cpu:.2f} s | {our_rollout:.2f} s (incl. judge) | - | {our_update:.2f} s "
          f"| ~{calls - 1:.2f} ({calls:.2f} model calls) "
          f"| {statistics.fmean(r['rollout/response_tokens_mean'] for r in ours):.1f} "
          f"| {statistics.fmean(r['reward/mean'] for r in ours):.3f} |")
    ckpt = ", grad. ckpt" if args.trl_gradient_checkpointing else ""
    print(f"| TRL GRPOTrainer (environment_factory{ckpt}) | {their_step:.2f} s | {their_cpu:.2f} s | {their_gen:.2f} s "
          f"| {their_gen_score - their_gen:.2f} s | {their_update:.2f} s "
          f"| {statistics.fmean(h.get('tools/call_frequency', 0.0) for h in theirs):.2f} "
          f"(failures {statistics.fmean(h.get('tools/failure_frequency', 0.0) for h in theirs):.2f}) "
          f"| {statistics.fmean(h['completions/mean_length'] for h in theirs):.1f} "
          f"| {statistics.fmean(h['reward'] for h in theirs):.3f} |")
    print(f"TRL time per step / astuner time per step = {their_step / our_step:.2f} "
          f"(rollout {their_gen / our_rollout:.2f}, update {their_update / max(our_update, 1e-9):.2f}); "
          f"CPU time ratio {their_cpu / our_cpu:.2f}")
    print("per step, astuner (s):", [round(r["perf/time_step_s"], 2) for r in ours])
    print("per step, TRL (s):    ", [round(t, 2) for t in their_times])
    if "example" in parts:
        print("a TRL completion with a tool call (step 1):", json.dumps(parts["example"]))


if __name__ == "__main__":
    main()
