"""Warm start for the tool-using CPU example: a tiny random model cannot discover a tool-call format by RL,
so it first learns the protocol from demonstrations, as real recipes do (SFT, then RL).

The demonstrations are produced by the example's own workflow (the real ReActAgent, formatter and
ModelTuner) with a scripted engine that replies as an expert would: call `add` with the question's
numbers, then answer with the tool's result in \\boxed{}. The recorded token sequences (prompt, generated
spans with mask 1, tool results with mask 0) are what the model is fine-tuned on, so training sees exactly
the tokens the agent produces at run time.

    python tutorial/example_tool_cpu/warm_start.py [--out launcher_record/.models/tool_cpu_warm] [--steps 150]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONF = HERE / "calc_agent.yaml"


class ExpertEngine:
    """Replies as an expert agent would, read off the prompt text (our engine protocol)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, prompt_ids, sampling):
        from astuner.rollout.engines.base import GenerateResult

        text = self.tokenizer.decode(prompt_ids)
        results = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", text, re.S)
        if results:
            reply = f"\\boxed{{{results[-1]}}}"
        else:
            a, b = re.findall(r"What is (\d+) \+ (\d+)", text)[-1]
            reply = '<tool_call>\n{"name": "add", "arguments": {"a": %s, "b": %s}}\n</tool_call>' % (a, b)
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.end]
        return GenerateResult(ids, [0.0] * len(ids), "stop")

    async def update_weights(self, state_dict):
        return None


def demonstrations(run, plugins, tokenizer):
    from astuner.rollout.manager import RolloutManager, build_judge
    from astuner.task_reader import build_task_reader

    tasks = build_task_reader(run.astuner, run.extra_roots).train_tasks()
    judge = build_judge(plugins.judge, run.astuner) if plugins.judge else None
    manager = RolloutManager(run.astuner, plugins.workflow, judge, ExpertEngine(tokenizer), tokenizer)
    batch = asyncio.run(manager.run(tasks, num_repeat=1, check_error_rate=False))
    rewards = [e.reward for e in batch.episodes]
    return batch.samples, sum(rewards) / len(rewards)


def sft(model, samples, steps: int, lr: float, seed: int, batch: int = 16) -> list[float]:
    """Cross-entropy on the generated spans (mask 1) of the samples, random mini-batches, AdamW."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    model.train()
    for _ in range(steps):
        chosen = [samples[int(i)] for i in torch.randperm(len(samples), generator=generator)[:batch]]
        width = max(len(s.input_ids) for s in chosen)
        ids = torch.zeros(len(chosen), width, dtype=torch.long)
        labels = torch.full((len(chosen), width), -100, dtype=torch.long)
        attention = torch.zeros(len(chosen), width, dtype=torch.long)
        for row, s in enumerate(chosen):
            ids[row, :len(s.input_ids)] = torch.tensor(s.input_ids)
            attention[row, :len(s.input_ids)] = 1
            for k, m in enumerate(s.loss_mask):
                if m:
                    labels[row, s.prompt_length + k] = s.input_ids[s.prompt_length + k]
        out = model(input_ids=ids, attention_mask=attention, labels=labels)
        optim.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        losses.append(out.loss.item())
    model.eval()
    return losses


def evaluate(run, plugins, tokenizer, model) -> dict:
    """The warm-started agent on the validation tasks, sampled at the run's temperature (hf engine)."""
    from astuner.rollout.engines.factory import build_engine
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


def warm_start(out: Path, steps: int = 150, lr: float = 3e-3, seed: int = 0) -> dict:
    """Create the tiny model at `out` (byte-level BPE, head size 64 for vLLM's CPU attention) and
    fine-tune it on the demonstrations; returns what happened."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from astuner.config import load_run_config, resolve_plugins
    from astuner.tiny_model import DEFAULT_CORPUS, build_tiny_model

    start = time.time()
    questions = [json.loads(line)["question"] for name in ("train", "val")
                 for line in (HERE / f"{name}.jsonl").read_text().splitlines()]
    corpus = DEFAULT_CORPUS + questions + ['{"name": "add", "arguments": {"a": 1, "b": 2}}', "\\boxed{12}"]
    build_tiny_model(out, seed=seed, hidden_size=128, layers=2, heads=2, kv_heads=1, corpus=corpus)
    run = load_run_config(CONF, [f"astuner.model.path={out}"])
    tokenizer = AutoTokenizer.from_pretrained(out)
    plugins = resolve_plugins(run)
    samples, expert_reward = demonstrations(run, plugins, tokenizer)
    model = AutoModelForCausalLM.from_pretrained(out)
    before = evaluate(run, plugins, tokenizer, model)["val_reward"]
    losses = sft(model, samples, steps, lr, seed)
    model.save_pretrained(out)
    return {"model": str(out), "demonstrations": len(samples), "expert_reward": expert_reward,
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
