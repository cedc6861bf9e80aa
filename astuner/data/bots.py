"""BOTS difficulty-based task selection: a Beta posterior over every task's pass rate, updated online.

Follows BOTS ("A Unified Framework for Bayesian Online Task Selection in LLM Reinforcement Finetuning",
the `difficulty_based` selector of Trinity-RFT, `trinity/buffer/selector/`):

- every task i has Beta(alpha_i, beta_i), starting at Beta(1, 1);
- after a batch, the tasks just run (set S, m rollouts each, pass rate r_i) give explicit evidence
  s_i = m r_i successes and f_i = m (1 - r_i) failures (0 for the others);
- every task gets implicit evidence from two reference pass-rate columns (a weaker model's w_i and a
  stronger model's v_i): p~_i = clip(w_i + c (v_i - w_i), 0, 1), where the capability coefficient c is
  estimated from the batch, c_batch = (mean_S r - mean_S w) / (mean_S v - mean_S w + 1e-6), smoothed as
  c <- d c + (1 - d) c_batch (d = 0.9; the first batch sets c); for i in S, p~_i = r_i;
- the posterior decays toward the prior by the forgetting factor lamb and absorbs both kinds of evidence,
  weighted by rho:
      alpha_i <- (1 - lamb) alpha_i + lamb + (1 - rho) s_i + rho m p~_i
      beta_i  <- (1 - lamb) beta_i  + lamb + (1 - rho) f_i + rho m (1 - p~_i)
  (with adaptive_rho, rho halves whenever the implicit estimate misses S's pass rates by 0.25 or more);
- selection scores each task by -|target_reward - p^_i|, p^_i the posterior mean or, with do_sample,
  a Thompson sample from Beta(alpha_i, beta_i); tau = 0 takes the top-k, otherwise k tasks are drawn
  without replacement from softmax(score / tau).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np


class BetaPassRateEstimator:
    def __init__(self, weak: Sequence[float], strong: Sequence[float], m: int = 16, lamb: float = 0.2,
                 rho: float = 0.2, adaptive_rho: bool = False, cap_discount: float = 0.9):
        self.weak = np.asarray(weak, dtype=float)
        self.strong = np.asarray(strong, dtype=float)
        if self.weak.shape != self.strong.shape or self.weak.ndim != 1:
            raise ValueError("the two reference pass-rate columns must have one value per task")
        n = len(self.weak)
        self.m, self.lamb, self.rho, self.adaptive_rho, self.cap_discount = m, lamb, rho, adaptive_rho, cap_discount
        self.alphas = np.ones(n)
        self.betas = np.ones(n)
        self.cap: Optional[float] = None

    def update(self, indices: Sequence[int], pass_rates: Sequence[float]) -> None:
        idx = np.asarray(indices, dtype=int)
        rates = np.asarray(pass_rates, dtype=float)
        batch_cap = (rates.mean() - self.weak[idx].mean()) / (self.strong[idx].mean() - self.weak[idx].mean() + 1e-6)
        self.cap = batch_cap if self.cap is None else self.cap_discount * self.cap + (1 - self.cap_discount) * batch_cap
        implicit = np.clip(self.weak + self.cap * (self.strong - self.weak), 0.0, 1.0)
        if self.adaptive_rho and np.mean(np.abs(implicit[idx] - rates)) >= 0.25:
            self.rho *= 0.5
        implicit[idx] = rates
        successes = np.zeros_like(self.alphas)
        failures = np.zeros_like(self.betas)
        successes[idx] = rates * self.m
        failures[idx] = (1 - rates) * self.m
        keep = 1 - self.lamb
        self.alphas = keep * self.alphas + self.lamb + (1 - self.rho) * successes + self.rho * self.m * implicit
        self.betas = keep * self.betas + self.lamb + (1 - self.rho) * failures + self.rho * self.m * (1 - implicit)

    def pass_rates(self, rng: Optional[np.random.Generator] = None, sample: bool = False) -> np.ndarray:
        if sample:
            return (rng or np.random.default_rng()).beta(self.alphas, self.betas)
        return self.alphas / (self.alphas + self.betas)

    def state_dict(self) -> dict[str, Any]:
        return {"alphas": self.alphas.tolist(), "betas": self.betas.tolist(), "cap": self.cap, "rho": self.rho}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alphas = np.asarray(state["alphas"], dtype=float)
        self.betas = np.asarray(state["betas"], dtype=float)
        self.cap, self.rho = state["cap"], state["rho"]


def select(scores: np.ndarray, k: int, tau: float, rng: np.random.Generator) -> list[int]:
    """Top-k of `scores` when tau == 0, else k indices drawn without replacement from softmax(scores / tau)."""
    k = min(k, len(scores))
    if tau == 0:
        return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]
    logits = scores / tau
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    return [int(i) for i in rng.choice(len(scores), size=k, replace=False, p=probs)]
