"""Token-level policy losses. Shapes: [B, T] tensors over the response part, `mask` 1 on trained tokens."""

from __future__ import annotations

from typing import Any

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_TYPES = ("low_var_kl", "kl")


def ppo_clip_loss(logp: Any, old_logp: Any, advantages: Any, clip_low: float, clip_high: float) -> tuple[Any, Any]:
    """Per-token clipped surrogate: max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high)), r = exp(logp - old).
    Returns (loss [B, T], clipped [B, T] as 0/1 floats). `advantages` is [B, T] (or [B, 1], broadcast)."""
    import torch

    ratio = torch.exp(logp - old_logp)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    return loss, (clipped > unclipped).float()


def kl_penalty(logp: Any, ref_logp: Any, kind: str) -> Any:
    """Per-token KL estimate to the reference policy: `kl` = logp - ref (k1); `low_var_kl` =
    exp(ref - logp) - (ref - logp) - 1 (k3, non-negative, clamped to [-10, 10])."""
    import torch

    if kind == "kl":
        return logp - ref_logp
    if kind == "low_var_kl":
        diff = ref_logp - logp
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
