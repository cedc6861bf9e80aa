"""Per-row temperature / top-p sampling with the log-prob of the chosen token under that distribution."""

from __future__ import annotations

from typing import Optional


def sample_next(logits, temperature, top_p, generator: Optional[object] = None, uniform: Optional[object] = None):
    """logits [B, V] float; temperature [B] (<= 0 means greedy); top_p [B] in (0, 1], or None for 1 on every row;
    `uniform` [B, 1] float64 in [0, 1): the rows' draws (None: drawn from `generator`).
    Returns (tokens [B] long, logprobs [B] float): for sampled rows the log-prob under
    softmax(logits / T) restricted to the top-p nucleus and renormalised; for greedy rows the
    log-prob under softmax(logits)."""
    import torch

    greedy = temperature <= 0
    t = torch.where(greedy, torch.ones_like(temperature), temperature)
    logp = torch.log_softmax(logits / t[:, None], dim=-1)
    probs = logp.exp()
    if top_p is None:
        nucleus = probs  # no row truncates (every top_p is 1): the sort below would keep every token
    else:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # mass of strictly more likely tokens
        sorted_p = sorted_p.masked_fill(before >= top_p[:, None], 0.0)
        nucleus = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        nucleus = nucleus / nucleus.sum(dim=-1, keepdim=True)
    # inverse-CDF draw from uniforms made on the generator's device (the engine's is on the CPU: the same draws
    # for a seed on every device) and moved to the logits' device: one code path for CPU and CUDA logits, and no
    # generator handed to an op on another device ("Expected a 'cuda' device type for generator")
    if uniform is None:
        uniform = torch.rand(logits.shape[0], 1, generator=generator, dtype=torch.float64)
    uniform = uniform.to(logits.device)
    cdf = torch.cumsum(nucleus.double(), dim=-1)
    # right=True: the first token whose cumulative mass exceeds the draw, never a token outside the nucleus
    sampled = torch.searchsorted(cdf, uniform * cdf[:, -1:], right=True).squeeze(-1).clamp_max(logits.shape[-1] - 1)
    greedy_tokens = logits.argmax(dim=-1)
    tokens = torch.where(greedy, greedy_tokens, sampled)
    sampled_lp = torch.log(nucleus.gather(-1, tokens[:, None]).squeeze(-1))
    plain_lp = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, torch.where(greedy, plain_lp, sampled_lp)


def row_uniforms(generators: list, fallback: object):
    """One draw per row [B, 1] (float64, on the CPU): each row from its own generator (a request's seed), a row
    without one from `fallback` (the engine's)."""
    import torch

    return torch.cat([torch.rand(1, 1, generator=g if g is not None else fallback, dtype=torch.float64)
                      for g in generators])


def request_generators(seeds: list) -> Optional[list]:
    """A generator per request that has a seed (None for one that has not); None when no request has one."""
    if all(seed is None for seed in seeds):
        return None
    import torch

    return [None if seed is None else torch.Generator(device="cpu").manual_seed(int(seed)) for seed in seeds]
