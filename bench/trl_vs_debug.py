"""Side by side, in one run: astuner's debug backbone vs TRL's GRPOTrainer (use_vllm=False) on the same
tiny model, the same prompts x group size, the same max new tokens, learning rate and number of steps,
on this CPU. Prints the time per step of each, their ratio, and both learning curves (and writes
them to a PNG).

    pip install -e '.[bench]'
    python bench/trl_vs_debug.py [--steps 100] [--out /tmp/astuner_trl_bench]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "tutorial" / "example_tiny_cpu"
BATCH, GROUP, LR, MAX_NEW = 16, 8, 1e-3, 1


def tiny_model(out: Path) -> Path:
    from astuner.model.tiny_model import DEFAULT_CORPUS, build_tiny_model

    rows = [json.loads(line) for name in ("train.jsonl", "val.jsonl")
            for line in (TUTORIAL / name).read_text().splitlines()]
    corpus = DEFAULT_CORPUS + [r["question"] for r in rows] + [r["answer"] for r in rows] + [r["task_id"] for r in rows]
    return build_tiny_model(out, seed=0, tokenizer="words", corpus=corpus)


def run_astuner(model: Path, out: Path, steps: int) -> tuple[list[float], list[float]]:
    from astuner.cli import main

    code = main(["--conf", str(TUTORIAL / "tiny_cpu.yaml"), "--exp-dir", str(out), "astuner.experiment_name=astuner",
                 f"astuner.model.path={model}", f"astuner.trainer_common.total_training_steps={steps}",
                 f"astuner.data.train_batch_size={BATCH}", f"astuner.rollout.num_repeat={GROUP}",
                 f"astuner.trainer_common.optim.lr={LR}", f"astuner.rollout.max_response_length_in_one_turn={MAX_NEW}",
                 "astuner.trainer_common.algorithm.entropy_coeff=0.0", "astuner.trainer_common.test_freq=-1",
                 "astuner.trainer_common.val_before_train=false", "astuner.trainer_common.save_freq=-1",
                 "astuner.trainer_common.optim.weight_decay=0.0"])
    if code != 0:
        raise SystemExit(f"astuner run failed with exit code {code}")
    rows = [json.loads(line) for line in (out / "astuner" / "metrics.jsonl").read_text().splitlines()]
    return [r["reward/mean"] for r in rows], [r["perf/time_step_s"] for r in rows]


def run_trl(model: Path, out: Path, steps: int) -> tuple[list[float], list[float]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from astuner.task_judge.math_answer import answers_match, extract_answer

    rows = [json.loads(line) for line in (TUTORIAL / "train.jsonl").read_text().splitlines()]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]}
                                 for r in rows])

    def reward(completions, answer, **_):
        out = []
        for completion, truth in zip(completions, answer):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            predicted = extract_answer(text)
            out.append(1.0 if predicted is not None and answers_match(predicted, truth) else 0.0)
        return out

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t)

    config = GRPOConfig(
        output_dir=str(out / "trl"), max_steps=steps, learning_rate=LR, lr_scheduler_type="constant",
        weight_decay=0.0, per_device_train_batch_size=BATCH * GROUP, gradient_accumulation_steps=1,
        num_generations=GROUP, max_completion_length=MAX_NEW, temperature=1.0, top_p=1.0, beta=0.0, epsilon=0.2,
        num_iterations=1, use_vllm=False, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no",
        report_to=[], seed=0, max_grad_norm=1.0, disable_tqdm=True)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model), reward_funcs=reward, args=config,
                          train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(model),
                          callbacks=[Timer()])
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return rewards, times


def windows(values: list[float], size: int) -> list[float]:
    return [statistics.fmean(values[i:i + size]) for i in range(0, len(values), size)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("/tmp/astuner_trl_bench"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = tiny_model(args.out / "model")
    ours, our_times = run_astuner(model, args.out, args.steps)
    theirs, their_times = run_trl(model, args.out, args.steps)
    skip = 1  # the first step carries warm-up on both sides
    ours_step, theirs_step = statistics.median(our_times[skip:]), statistics.median(their_times[skip:])
    print(f"setup: tiny Qwen2 ({model}), {BATCH} prompts x {GROUP} completions per step, {MAX_NEW} new token(s), "
          f"lr {LR}, {args.steps} steps, CPU, {sys.platform}")
    print("| trainer | median time per step | reward, first 10 steps | reward, last 10 steps |")
    print("| --- | --- | --- | --- |")
    print(f"| astuner debug backbone | {ours_step * 1000:.0f} ms | {statistics.fmean(ours[:10]):.3f} | "
          f"{statistics.fmean(ours[-10:]):.3f} |")
    print(f"| TRL GRPOTrainer | {theirs_step * 1000:.0f} ms | {statistics.fmean(theirs[:10]):.3f} | "
          f"{statistics.fmean(theirs[-10:]):.3f} |")
    print(f"TRL time per step / astuner time per step = {theirs_step / ours_step:.2f}")
    print("reward by 10-step window, astuner:", [round(v, 2) for v in windows(ours, 10)])
    print("reward by 10-step window, TRL:    ", [round(v, 2) for v in windows(theirs, 10)])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(range(1, len(ours) + 1), ours, label="astuner debug backbone")
    ax.plot(range(1, len(theirs) + 1), theirs, label="TRL GRPOTrainer")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out / "trl_vs_debug.png", dpi=100)
    print(f"curves: {args.out / 'trl_vs_debug.png'}")


if __name__ == "__main__":
    main()
