"""Warm start for the tool-using CPU example: a tiny random model cannot discover a tool-call format by RL,
so it first learns the protocol from demonstrations, as real recipes do (SFT, then RL).

The demonstrations are produced by the example's own workflow (the real ReActAgent, formatter and
ModelTuner) played by `calc_agent.expert` (call `add` with the question's numbers, then answer with the
tool's result in \\boxed{}), through astuner's SFT stage (`astuner.backbone.debug.sft`, what
`trainer_common.sft` runs in the debug backbone). The recorded token sequences (prompt, generated spans
with mask 1, tool results with mask 0) are what the model is fine-tuned on, so training sees exactly the
tokens the agent produces at run time. This script writes a standalone warm-started model for the
distributed backbones (vLLM's CPU attention wants head size 64 and a byte-level BPE tokenizer).

    python tutorial/example_tool_cpu/warm_start.py [--out launcher_record/.models/tool_cpu_warm] [--steps 150]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONF = HERE / "calc_agent.yaml"


def evaluate(run, plugins, tokenizer, model) -> dict:
    """The warm-started agent on the validation tasks, sampled at the run's temperature (hf engine)."""
    from astuner.model.engines.factory import build_engine
    from astuner.rollout.manager import RolloutManager, build_judge
    from astuner.task_reader import build_task_reader

    tasks = build_task_reader(run.astuner, run.extra_roots).val_tasks()
    judge = build_judge(plugins.judge, run.astuner) if plugins.judge else None
    engine = build_engine(run.astuner, tokenizer, model=model)
    manager = RolloutManager(run.astuner, plugins.workflow, judge, engine, tokenizer)
    batch = asyncio.run(manager.run(tasks, num_repeat=1, check_error_rate=False))
    episodes = batch.episodes
    return {"val_reward": sum(e.reward for e in episodes) / len(episodes),
            "val_calls_per_episode": sum(len(e.recorder.calls) for e in episodes) / len(episodes)}


def base_model(out: Path, seed: int = 0) -> Path:
    """The tiny random model at `out`, before any training: byte-level BPE over the example's questions and the
    tool protocol, head size 64 for vLLM's CPU attention. (What `trainer_common.sft` warm-starts in the same
    command as RL, on any backbone; `warm_start` below does it standalone.)"""
    from astuner.model.tiny_model import DEFAULT_CORPUS, build_tiny_model

    questions = [json.loads(line)["question"] for name in ("train", "val")
                 for line in (HERE / f"{name}.jsonl").read_text().splitlines()]
    corpus = DEFAULT_CORPUS + questions + ['{"name": "add", "arguments": {"a": 1, "b": 2}}', "\\boxed{12}"]
    return build_tiny_model(out, seed=seed, hidden_size=128, layers=2, heads=2, kv_heads=1, corpus=corpus)


def warm_start(out: Path, steps: int = 150, lr: float = 3e-3, seed: int = 0) -> dict:
    """Create the tiny model at `out` (`base_model`) and fine-tune it on the demonstrations; returns what
    happened."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from astuner.config import load_run_config
    from astuner.plugins import resolve_plugins
    from astuner.rollout.manager import RolloutManager, build_judge
    from astuner.task_reader import build_task_reader
    from astuner.backbone.debug import sft
    from calc_agent import expert  # this folder is on sys.path (script, or the tests that import this)

    start = time.time()
    base_model(out, seed)
    run = load_run_config(CONF, [f"astuner.model.path={out}"])
    tokenizer = AutoTokenizer.from_pretrained(out)
    plugins = resolve_plugins(run)
    judge = build_judge(plugins.judge, run.astuner) if plugins.judge else None
    tasks = build_task_reader(run.astuner, run.extra_roots).train_tasks()
    demos = asyncio.run(sft.play(lambda engine: RolloutManager(run.astuner, plugins.workflow, judge, engine, tokenizer),
                                 expert, tokenizer, tasks, per_task=1, min_reward=1.0))
    samples = demos.samples
    model = AutoModelForCausalLM.from_pretrained(out)
    before = evaluate(run, plugins, tokenizer, model)["val_reward"]
    losses = sft.train(model, samples, steps, lr, batch_size=16, seed=seed, pad_id=tokenizer.pad_token_id,
                       token_budget=16384, dtype="fp32")
    model.save_pretrained(out)
    return {"model": str(out), "demonstrations": len(samples), "expert_reward": demos.expert_reward,
            "tokens_per_demonstration": sum(len(s.input_ids) for s in samples) / len(samples),
            "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4), "val_reward_before": before,
            **evaluate(run, plugins, tokenizer, model), "seconds": round(time.time() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="launcher_record/.models/tool_cpu_warm")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(warm_start(Path(args.out).absolute(), args.steps, args.lr, args.seed)))


if __name__ == "__main__":
    main()
