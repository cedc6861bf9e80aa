"""Samples -> padded tensors for the training forward, in micro-batches bounded by a token budget.

Rows are left-padded and position ids are derived from the attention mask, exactly as in generation,
so the trainer's log-probs match the engine's. The response part of every row is right-aligned: the
last `R` columns of the per-token log-probs, `R` = the longest response in the micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from astuner.schema import Sample


@dataclass
class MicroBatch:
    samples: list[Sample]
    input_ids: Any  # [B, W]
    attention_mask: Any  # [B, W]
    position_ids: Any  # [B, W]
    response_mask: Any  # [B, R] float, 1 on trained tokens
    old_logprobs: Any  # [B, R]
    advantages: Any  # [B, R]
    response_width: int


def split_by_budget(samples: Sequence[Sample], token_budget: int) -> list[list[Sample]]:
    """Consecutive groups whose rows x longest length stays within `token_budget` (at least one row each)."""
    groups: list[list[Sample]] = []
    current: list[Sample] = []
    width = 0
    for s in samples:
        w = max(width, len(s.input_ids))
        if current and w * (len(current) + 1) > token_budget:
            groups.append(current)
            current, w = [], len(s.input_ids)
        current.append(s)
        width = w
    if current:
        groups.append(current)
    return groups


def collate(samples: Sequence[Sample], pad_id: int, device: Any) -> MicroBatch:
    import torch

    width = max(len(s.input_ids) for s in samples)
    resp = max(len(s.loss_mask) for s in samples)
    b = len(samples)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, resp), dtype=torch.float32)
    old = torch.zeros((b, resp), dtype=torch.float32)
    adv = torch.zeros((b, resp), dtype=torch.float32)
    for i, s in enumerate(samples):
        n, r = len(s.input_ids), len(s.loss_mask)
        input_ids[i, width - n:] = torch.tensor(s.input_ids, dtype=torch.long)
        attention[i, width - n:] = 1
        mask[i, resp - r:] = torch.tensor(s.loss_mask, dtype=torch.float32)
        old[i, resp - r:] = torch.tensor(s.logprobs, dtype=torch.float32)
        adv[i, resp - r:] = s.advantage
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return MicroBatch(list(samples), input_ids.to(device), attention.to(device), positions.to(device),
                      mask.to(device), old.to(device), adv.to(device), resp)


def response_logprobs(model: Any, batch: MicroBatch, temperature: float, with_entropy: bool = False,
                      dtype: str = "fp32") -> tuple[Any, Any]:
    """Log-probs [B, R] of the response tokens under softmax(logits / temperature), and their entropy; the
    forward computes in `dtype` (astuner.model.precision), the log-softmax in fp32."""
    import torch

    from astuner.model.logits import last_logits_kwargs
    from astuner.model.precision import autocast

    r = batch.response_width
    with autocast(batch.input_ids.device, dtype):
        # the output head only over the positions that predict response tokens (and the last one, unused)
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                    use_cache=False, **last_logits_kwargs(model, r + 1))
    logits = out.logits[:, -(r + 1):-1, :].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    targets = batch.input_ids[:, -r:]
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy
