"""Token-level policy losses. Shapes: [B, T] tensors over the response part, `mask` 1 on trained tokens."""

from __future__ import annotations

from typing import Any

from astuner.config.schema_trainer import AGG_MODES, KL_TYPES  # declared with their keys


def ppo_clip_loss(logp: Any, old_logp: Any, advantages: Any, clip_low: float, clip_high: float,
                  clip_ratio_c: float = 3.0) -> tuple[Any, Any]:
    """Per-token dual-clip PPO surrogate, as verl's and Trinity's: max(-A * r, -A * clip(r, 1 - clip_low,
    1 + clip_high)), and for A < 0 at most -A * clip_ratio_c (a token whose ratio ran far above 1 cannot
    push the loss without bound); r = exp(logp - old) with the log-ratio clamped to [-20, 20] first.
    Returns (loss [B, T], clipped [B, T] as 0/1 floats). `advantages` is [B, T] (or [B, 1], broadcast)."""
    import torch

    ratio = torch.exp(torch.clamp(logp - old_logp, min=-20.0, max=20.0))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * clip_ratio_c), loss)
    return loss, (clipped > unclipped).float()


def kl_penalty(logp: Any, ref_logp: Any, kind: str) -> Any:
    """Per-token KL estimate to the reference policy: `kl` = logp - ref (k1); `low_var_kl` =
    exp(d) - d - 1 with d = ref - logp clamped to [-20, 20] first (k3, non-negative; the result clamped to
    [-10, 10]), as verl: an unclamped gap over ~88 overflows exp and turns the gradients NaN."""
    import torch

    if kind == "kl":
        return logp - ref_logp
    if kind == "low_var_kl":
        diff = torch.clamp(ref_logp - logp, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(diff) - diff - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"unknown kl type {kind!r}; choose one of {', '.join(KL_TYPES)}")


def aggregate(values: Any, mask: Any, mode: str, token_total: float, seq_total: float) -> Any:
    """Sum of this micro-batch's share of the mini-batch loss, so that summing the results over the
    micro-batches of a mini-batch gives: `token-mean` — the mean over all trained tokens of the
    mini-batch (`token_total` of them); `seq-mean-token-mean` — the mean over its `seq_total` sequences
    of each sequence's token mean; `seq-mean-token-sum` — the mean over sequences of token sums."""
    if mode == "token-mean":
        return (values * mask).sum() / max(token_total, 1.0)
    per_seq_tokens = mask.sum(-1).clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        return ((values * mask).sum(-1) / per_seq_tokens).sum() / max(seq_total, 1.0)
    if mode == "seq-mean-token-sum":
        return (values * mask).sum(-1).sum() / max(seq_total, 1.0)
    raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {', '.join(AGG_MODES)}")
