"""Policy updates: PPO-clipped surrogate against the old policy's log-probs — recomputed by the trainer before
the step's first update, under the same temperature, as verl does (or, when the batch makes one optimizer
step, taken from that step's own forward pass, detached): the engine's log-probs are under the
top-p nucleus it sampled from (renormalised), the trainer's under the full softmax(logits / T), so at top_p
0.5 the engine's would put half the tokens outside the clip range before any update; they stay for the
`actor/rollout_logprob_diff` diagnostic — with optional KL to the frozen initial policy and an entropy
bonus; `ppo_epochs` passes, `mini_batch_num` optimizer steps per pass, micro-batches by token budget with
gradient accumulation."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from astuner.algorithm.losses import aggregate, kl_penalty, ppo_clip_loss
from astuner.config.schema_trainer import TrainerCommonConfig
from astuner.model.precision import compute_dtype
from astuner.schema import Sample
from astuner.backbone.debug.batching import collate, response_logprobs, split_by_budget


class PolicyTrainer:
    def __init__(self, model: Any, pad_id: int, cfg: TrainerCommonConfig, reference: Optional[Any] = None,
                 params: Optional[list[Any]] = None, adapter: Optional[str] = None):
        """`params`: what the optimizer updates (default: every parameter that requires a gradient); `adapter`:
        the LoRA adapter of a multi-adapter peft model this trainer updates (made the active one for its update:
        its forward passes and its gradients)."""
        import torch

        self.model, self.pad_id, self.cfg = model, pad_id, cfg
        self.reference, self.adapter = reference, adapter
        self.device = next(model.parameters()).device
        self.dtype = compute_dtype(cfg.dtype, self.device.type)  # the forward passes' (astuner.model.precision)
        o = cfg.optim
        params = params if params is not None else [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=o.lr,
                                           betas=tuple(o.betas), weight_decay=o.weight_decay)
        self.optimizer_steps = 0

    def current_lr(self) -> float:
        o = self.cfg.optim
        if o.warmup_steps and self.optimizer_steps < o.warmup_steps:
            return o.lr * (self.optimizer_steps + 1) / o.warmup_steps
        return o.lr

    def one_step_per_batch(self) -> bool:
        return self.cfg.ppo_epochs == 1 and self.cfg.mini_batch_num == 1

    def _logprobs(self, model: Any, samples: Sequence[Sample], temperature: float) -> dict[int, list[float]]:
        """Each sample's response log-probs under `model` (no gradient), keyed by id(sample)."""
        import torch

        out: dict[int, list[float]] = {}
        with torch.no_grad():
            for group in split_by_budget(samples, self.cfg.max_token_len_per_micro_batch):
                batch = collate(group, self.pad_id, self.device)
                logp, _ = response_logprobs(model, batch, temperature, dtype=self.dtype)
                for i, s in enumerate(group):
                    out[id(s)] = logp[i, batch.response_width - len(s.loss_mask):].tolist()
        return out

    def _per_token(self, values: dict[int, list[float]], part: Sequence[Sample], batch: Any) -> Any:
        """Per-sample response values as a [B, R] tensor aligned with `batch` (responses end at the right)."""
        import torch

        out = torch.zeros_like(batch.old_logprobs)
        for i, s in enumerate(part):
            row = values[id(s)]
            out[i, batch.response_width - len(row):] = torch.tensor(row, dtype=out.dtype, device=self.device)
        return out

    def update(self, samples: Sequence[Sample], temperature: float, is_cap: Optional[float] = None,
               anchor: str = "learner") -> dict[str, float]:
        """One policy update on the samples of a step (advantages already set). `is_cap`: samples may come from
        older weights than the learner's (off-policy), and `anchor` says around which policy PPO's clip is:
        `behaviour` — the engine's recorded log-probs are the old policy (Trinity-RFT's off-policy loss): the ratio
        to the weights that sampled a token is clipped, so a token the updates since moved past the clip range in
        its advantage's direction is not pushed further; `learner` — decoupled PPO: the clip around the learner's
        own weights before the step, each token's loss weighted by pi_old / pi_behaviour capped at `is_cap`
        (truncated importance sampling)."""
        import torch

        cfg, al = self.cfg, self.cfg.algorithm
        if self.adapter is not None:  # the policy's own adapter in every forward pass below, and only its gradients
            self.model.set_adapter(self.adapter)
        temperature = temperature if temperature > 0 else 1.0
        samples = list(samples)
        ref: dict[int, list[float]] = {}
        if al.use_kl_loss:
            if self.reference is None:
                raise ValueError("use_kl_loss needs a reference model")
            ref = self._logprobs(self.reference, samples, temperature)
        self.model.train()
        # one optimizer step per batch (one mini-batch, one epoch): every micro-batch's forward runs on the old
        # weights, so its own log-probs (detached) are the old policy's and the extra forward pass is spared
        single_step = self.one_step_per_batch()
        old = {} if single_step else self._logprobs(self.model, samples, temperature)  # before this step's updates
        for s in samples:
            s.trainer_logprobs = old.get(id(s))  # kept for the trajectory viewer
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}

        def add(key: str, value: float, weight: float = 1.0) -> None:
            sums[key] = sums.get(key, 0.0) + value * weight
            counts[key] = counts.get(key, 0.0) + weight

        skipped = micro_batches = 0
        minis = [samples[i::cfg.mini_batch_num] for i in range(cfg.mini_batch_num)]
        for epoch in range(cfg.ppo_epochs):
            for mini in minis:
                if not mini:
                    continue
                token_total = float(sum(sum(s.loss_mask) for s in mini))
                seq_total = float(len(mini))
                for group in self.optimizer.param_groups:
                    group["lr"] = self.current_lr()
                self.optimizer.zero_grad(set_to_none=True)
                for part in split_by_budget(mini, cfg.max_token_len_per_micro_batch):
                    micro_batches += 1
                    batch = collate(part, self.pad_id, self.device)
                    # the full-vocabulary entropy only where it is a loss term (as verl: no actor/entropy then)
                    logp, entropy = response_logprobs(self.model, batch, temperature,
                                                      with_entropy=bool(al.entropy_coeff), dtype=self.dtype)
                    mask = batch.response_mask
                    old_logp = logp.detach() if single_step else self._per_token(old, part, batch)
                    learner_logp = old_logp
                    if is_cap is not None and anchor == "behaviour":
                        old_logp = batch.old_logprobs  # the weights that sampled each token
                    if single_step:
                        rows = learner_logp.tolist()  # one device-to-host copy per micro-batch
                        for i, s in enumerate(part):
                            s.trainer_logprobs = rows[i][batch.response_width - len(s.loss_mask):]
                    pg, clipped = ppo_clip_loss(logp, old_logp, batch.advantages, al.clip_ratio_low,
                                                al.clip_ratio_high, al.clip_ratio_c)
                    if is_cap is not None and anchor == "learner":
                        weight = torch.exp(torch.clamp(old_logp.detach() - batch.old_logprobs, min=-20.0, max=20.0))
                        with torch.no_grad():
                            add("off_policy/is_weight_mean", float((weight * mask).sum().item()) / max(float(
                                mask.sum().item()), 1.0), float(mask.sum().item()))
                            add("off_policy/is_capped_frac", float(((weight > is_cap) * mask).sum().item()) / max(
                                float(mask.sum().item()), 1.0), float(mask.sum().item()))
                        pg = pg * weight.clamp(max=is_cap)
                    loss = aggregate(pg, mask, al.loss_agg_mode, token_total, seq_total)
                    n_tok = float(mask.sum().item())
                    if al.use_kl_loss:
                        kl = kl_penalty(logp, self._per_token(ref, part, batch), al.kl_loss_type)
                        loss = loss + al.kl_loss_coef * aggregate(kl, mask, al.loss_agg_mode, token_total, seq_total)
                        add("actor/kl", float((kl * mask).sum().item()) / max(n_tok, 1.0), n_tok)
                    if entropy is not None:
                        loss = loss - al.entropy_coeff * aggregate(entropy, mask, al.loss_agg_mode, token_total,
                                                                   seq_total)
                    loss.backward()
                    with torch.no_grad():
                        add("actor/pg_loss", float((pg * mask).sum().item()) / max(n_tok, 1.0), n_tok)
                        if entropy is not None:
                            add("actor/entropy", float((entropy * mask).sum().item()) / max(n_tok, 1.0), n_tok)
                        add("actor/clip_frac", float((clipped * mask).sum().item()) / max(n_tok, 1.0), n_tok)
                        ratio = torch.exp(logp - old_logp)
                        add("actor/ratio_mean", float((ratio * mask).sum().item()) / max(n_tok, 1.0), n_tok)
                        if epoch == 0:
                            diff = (logp - batch.old_logprobs).abs()
                            add("actor/rollout_logprob_diff", float((diff * mask).sum().item()) / max(n_tok, 1.0),
                                n_tok)
                # this trainer's parameters only: another policy's on a shared module keep their own gradients
                params = [p for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
                clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip).item()) if params else 0.0
                if math.isfinite(grad_norm):
                    self.optimizer.step()
                    self.optimizer_steps += 1
                else:
                    skipped += 1  # a non-finite gradient: the step is skipped, the weights stay
                add("actor/grad_norm", grad_norm if math.isfinite(grad_norm) else 0.0)
        self.model.eval()
        metrics = {k: sums[k] / counts[k] for k in sums if counts[k]}
        metrics["actor/lr"] = self.current_lr()
        metrics["actor/optimizer_steps"] = float(self.optimizer_steps)
        metrics["actor/skipped_steps"] = float(skipped)
        metrics["actor/micro_batches"] = float(micro_batches)
        return metrics
