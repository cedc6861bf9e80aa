"""The supervised warm start (`trainer_common.sft`): demonstrations played by an expert through the user's
own workflow, then cross-entropy on their generated tokens.

The expert is an async function `(prompt: str) -> str`: it reads the rendered prompt (chat template
applied, tool results included) and answers as the agent should. `ExpertEngine` puts it behind our engine
protocol, so the episodes run through the real agent, formatter, `ModelTuner` and context tracker: the
samples are token for token what the agent produces at run time (prompts and tool results mask 0,
the expert's replies mask 1). Episodes the judge scores below `min_reward` are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from astuner.model.engines.base import GenerateResult, SamplingParams
from astuner.schema import Sample


class ExpertEngine:
    """An engine whose replies come from the expert function (log-probs 0: nobody trains on them)."""

    def __init__(self, expert: Callable[[str], Any], tokenizer: Any):
        self.expert, self.tokenizer = expert, tokenizer
        end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        self.end = end if end is not None else tokenizer.eos_token_id

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        reply = await self.expert(self.tokenizer.decode(prompt_ids))
        ids = self.tokenizer.encode(str(reply), add_special_tokens=False)[: max(0, sampling.max_tokens - 1)]
        ids.append(self.end)
        return GenerateResult(ids, [0.0] * len(ids), "stop")

    async def update_weights(self, state_dict: Any) -> None:
        return None


@dataclass
class Demonstrations:
    samples: list[Sample]
    episodes: int
    kept_episodes: int
    expert_reward: float


async def play(manager_for: Callable[[Any], Any], expert: Callable[[str], Any], tokenizer: Any, tasks: Sequence[Any],
               per_task: int, min_reward: float) -> Demonstrations:
    """The expert's episodes on `tasks` (`per_task` each) through `manager_for(engine)`, a RolloutManager."""
    manager = manager_for(ExpertEngine(expert, tokenizer))
    batch = await manager.run(list(tasks), num_repeat=per_task, check_error_rate=False)
    kept = [e for e in batch.episodes if e.reward is not None and e.reward >= min_reward and not e.failed]
    kept_ids = {id(e) for e in kept}
    samples = [s for e in batch.episodes if id(e) in kept_ids for s in e.samples]
    rewards = [e.reward for e in batch.episodes if e.reward is not None]
    return Demonstrations(samples, len(batch.episodes), len(kept), sum(rewards) / max(1, len(rewards)))


def train(model: Any, samples: Sequence[Sample], steps: int, lr: float, batch_size: int, seed: int, pad_id: int,
          token_budget: int, dtype: str, grad_clip: float | None = 1.0, label: str = "SFT warm start") -> list[float]:
    """`steps` AdamW steps of token-mean cross-entropy over the samples' trained tokens (mask 1), on random
    mini-batches of `batch_size` samples (micro-batched by `token_budget`); the loss of each step. Progress: a
    bar on a terminal, else a line every 30 s (step, loss, ETA), under `label`."""
    import torch

    from astuner.records.progress import Progress

    if not samples:
        return []
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)  # a CPU generator: the same batches on every device
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    losses: list[float] = []
    model.train()
    bar = Progress(steps, label)
    try:
        for _ in range(steps):
            chosen = [samples[int(i)] for i in torch.randperm(len(samples), generator=generator)[:batch_size]]
            losses.append(_sft_step(model, chosen, optimizer, token_budget, pad_id, device, dtype, grad_clip,
                                    len(losses) + 1))
            bar.update(1, loss=f"{losses[-1]:.3f}")
    finally:
        bar.close()
        model.eval()
    return losses


def _sft_step(model: Any, chosen: Sequence[Sample], optimizer: Any, token_budget: int, pad_id: int, device: Any,
              dtype: str, grad_clip: float | None, number: int) -> float:
    """One AdamW step on `chosen`; its loss (a non-finite one: RunFailed, before the weights move)."""
    import torch

    from astuner.backbone.debug.batching import collate, response_logprobs, split_by_budget

    tokens = sum(sum(s.loss_mask) for s in chosen)
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for group in split_by_budget(chosen, token_budget):
        batch = collate(group, pad_id, device)
        logp, _ = response_logprobs(model, batch, 1.0, dtype=dtype)
        loss = -(logp * batch.response_mask).sum() / max(1, tokens)
        loss.backward()
        total += loss.item()
    if not math.isfinite(total):  # before the step: the weights stay as they were
        from astuner.errors import RunFailed

        raise RunFailed(f"SFT warm start: the loss is {total} at step {number}; lower astuner.trainer_common.sft.lr")
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return total
