"""The trainer's log-probs equal the engine's; an update moves probability toward positive advantages."""

from __future__ import annotations

import asyncio

import pytest
import torch

from astuner.config.schema_trainer import TrainerCommonConfig
from astuner.model.engines.base import SamplingParams
from astuner.model.engines.hf import HFEngine
from astuner.schema import Sample
from astuner.backbone.debug.batching import collate, response_logprobs, split_by_budget
from astuner.backbone.debug.policy import PolicyTrainer


def rollout_samples(tiny_model_dir, tokenizer, temperature=0.8, top_p=1.0):
    engine = HFEngine.from_pretrained(str(tiny_model_dir), tokenizer, max_num_seqs=8, seed=0)
    prompts = [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                                              add_generation_prompt=True, tokenize=False),
                                add_special_tokens=False)
               for q in ("What is 2+3?", "Natalia sold clips to her friends in April", "hi")]

    async def go():
        return await asyncio.gather(*[engine.generate(p, SamplingParams(temperature, top_p, 10)) for p in prompts])

    results = asyncio.run(go())
    samples = [Sample(task_id=f"t{i}", episode_uuid=f"e{i}", repeat_index=0, input_ids=p + r.token_ids,
                      prompt_length=len(p), loss_mask=[1] * len(r.token_ids), logprobs=r.logprobs)
               for i, (p, r) in enumerate(zip(prompts, results))]
    return engine.model, samples


def test_training_forward_reproduces_rollout_logprobs(tiny_model_dir, tokenizer):
    model, samples = rollout_samples(tiny_model_dir, tokenizer)
    batch = collate(samples, tokenizer.pad_token_id, model.device)  # left-padded, mixed lengths
    with torch.no_grad():
        logp, _ = response_logprobs(model, batch, temperature=0.8)
    assert torch.allclose(logp * batch.response_mask, batch.old_logprobs * batch.response_mask, atol=1e-4)


def test_micro_batches_respect_the_token_budget(tiny_model_dir, tokenizer):
    _, samples = rollout_samples(tiny_model_dir, tokenizer)
    for group in split_by_budget(samples, 60):
        assert len(group) == 1 or len(group) * max(len(s.input_ids) for s in group) <= 60


def test_update_raises_logprob_of_positive_advantage_tokens(tiny_model_dir, tokenizer):
    model, samples = rollout_samples(tiny_model_dir, tokenizer)
    for s, adv in zip(samples, (1.0, -1.0, 1.0)):
        s.advantage = adv
    cfg = TrainerCommonConfig()
    cfg.optim.lr = 1e-2
    cfg.optim.weight_decay = 0.0
    trainer = PolicyTrainer(model, tokenizer.pad_token_id, cfg)
    batch = collate(samples, tokenizer.pad_token_id, model.device)
    with torch.no_grad():
        before, _ = response_logprobs(model, batch, 0.8)
    metrics = trainer.update(samples, temperature=0.8)
    with torch.no_grad():
        after, _ = response_logprobs(model, batch, 0.8)
    change = ((after - before) * batch.response_mask).sum(-1)
    assert change[0] > 0 and change[2] > 0 and change[1] < 0
    assert metrics["actor/rollout_logprob_diff"] < 1e-4  # first epoch: same policy as the rollout
    assert metrics["actor/optimizer_steps"] == 1.0 and metrics["actor/grad_norm"] > 0


def mean_entropy(model, batch, temperature):
    with torch.no_grad():
        _, entropy = response_logprobs(model, batch, temperature, with_entropy=True)
    return float((entropy * batch.response_mask).sum() / batch.response_mask.sum())


def test_entropy_bonus_raises_entropy_and_is_skipped_at_zero(tiny_model_dir, tokenizer):
    """With advantages 0 the only gradient is the entropy term: the update must raise the policy's entropy
    over the trained tokens (a flipped sign lowers it). At entropy_coeff 0 the full-vocabulary entropy is not
    computed at all (no actor/entropy, as verl) and nothing moves."""
    model, samples = rollout_samples(tiny_model_dir, tokenizer)
    for s in samples:
        s.advantage = 0.0
    batch = collate(samples, tokenizer.pad_token_id, model.device)
    cfg = TrainerCommonConfig()
    cfg.optim.lr, cfg.optim.weight_decay = 1e-3, 0.0  # Adam's first step near the uniform policy: keep it small

    before = mean_entropy(model, batch, 0.8)
    metrics = PolicyTrainer(model, tokenizer.pad_token_id, cfg).update(samples, temperature=0.8)
    assert "actor/entropy" not in metrics and metrics["actor/grad_norm"] == 0.0
    assert mean_entropy(model, batch, 0.8) == before

    cfg.algorithm.entropy_coeff = 0.1
    metrics = PolicyTrainer(model, tokenizer.pad_token_id, cfg).update(samples, temperature=0.8)
    assert abs(metrics["actor/entropy"] - before) < 1e-4  # measured before the update, on the same tokens
    assert mean_entropy(model, batch, 0.8) > before + 5e-3  # measured +0.0098 (the sign flipped: -0.0042)


def test_first_update_ratio_is_one_under_top_p(tiny_model_dir, tokenizer):
    """The engine's log-probs at top_p 0.5 are under the renormalised nucleus; the trainer's PPO denominator
    is its own recomputation under the full softmax: on the step's first update the ratio is 1 and nothing
    is clipped (against the engine's, the mean ratio would be far below 1 and tokens clipped)."""
    model, samples = rollout_samples(tiny_model_dir, tokenizer, top_p=0.5)
    for s, adv in zip(samples, (1.0, -1.0, 1.0)):
        s.advantage = adv
    cfg = TrainerCommonConfig()
    metrics = PolicyTrainer(model, tokenizer.pad_token_id, cfg).update(samples, temperature=0.8)
    assert metrics["actor/clip_frac"] == 0.0 and abs(metrics["actor/ratio_mean"] - 1.0) < 1e-5
    assert metrics["actor/rollout_logprob_diff"] > 0.1  # the engine's nucleus log-probs differ, as they should


def test_micro_batches_accumulate_into_one_optimizer_step(tiny_model_dir, tokenizer):
    """A mini-batch split into micro-batches by the token budget takes the same step as one micro-batch:
    gradients accumulate over the micro-batches (zeroed once per optimizer step, not per micro-batch), so
    the gradient the optimizer steps on — its norm, before clipping — is the same."""
    import copy

    model, samples = rollout_samples(tiny_model_dir, tokenizer)
    for s, adv in zip(samples, (1.0, -1.0, 0.5)):
        s.advantage = adv
    norms = []
    for budget in (10**6, 1):  # one micro-batch; one per sample
        cfg = TrainerCommonConfig()
        cfg.optim.grad_clip, cfg.max_token_len_per_micro_batch = None, budget
        metrics = PolicyTrainer(copy.deepcopy(model), tokenizer.pad_token_id, cfg).update(samples, temperature=0.8)
        assert metrics["actor/optimizer_steps"] == 1.0
        norms.append(metrics["actor/grad_norm"])
    assert len(split_by_budget(samples, 1)) == 3
    assert norms[0] > 0 and abs(norms[0] - norms[1]) < 1e-5 * norms[0], norms


def test_bf16_compute_is_used_by_engine_and_trainer(tiny_model_dir, tokenizer):
    """dtype bf16: the trainer's and the hf engine's forward passes compute in bf16 over the fp32 module (their
    log-probs differ from fp32's by bf16 rounding, and agree with each other to that rounding)."""
    from astuner.model.engines.hf import pad_id_of, stop_token_ids_of

    model, samples = rollout_samples(tiny_model_dir, tokenizer)
    model = model.float()  # an inference engine's weights are bf16 on a GPU; the trainer's recipe keeps fp32 weights
    batch = collate(samples, tokenizer.pad_token_id, model.device)
    with torch.no_grad():
        fp32, _ = response_logprobs(model, batch, 0.8)
        bf16, _ = response_logprobs(model, batch, 0.8, dtype="bf16")
    gap = float(((fp32 - bf16).abs() * batch.response_mask).max())
    assert 1e-4 < gap < 0.05, gap
    prompt = tokenizer.encode("What is 2+3?", add_special_tokens=False)
    greedy = {}
    for dtype in ("fp32", "bf16"):
        engine = HFEngine(model, stop_token_ids_of(tokenizer, model), pad_id_of(tokenizer), seed=0, dtype=dtype)
        greedy[dtype] = asyncio.run(engine.generate(prompt, SamplingParams(0.0, 1.0, 10)))
    first = greedy["fp32"].token_ids[0]
    assert greedy["bf16"].token_ids[0] == first  # the same greedy token, scored in two precisions
    assert 1e-5 < abs(greedy["fp32"].logprobs[0] - greedy["bf16"].logprobs[0]) < 0.05
    sample = Sample(task_id="t", episode_uuid="e", repeat_index=0, input_ids=prompt + greedy["bf16"].token_ids,
                    prompt_length=len(prompt), loss_mask=[1] * 10, logprobs=greedy["bf16"].logprobs)
    one = collate([sample], tokenizer.pad_token_id, model.device)
    with torch.no_grad():
        trainer, _ = response_logprobs(model, one, 1.0, dtype="bf16")
    assert float(((trainer - one.old_logprobs).abs() * one.response_mask).max()) < 0.05


def test_one_step_batch_takes_old_logprobs_from_its_own_forward(tiny_model_dir, tokenizer, monkeypatch):
    """One optimizer step per batch: the old policy's log-probs come from that step's forward (no extra pass),
    and the update is the one the separate old-policy pass gives."""
    import copy

    model, samples = rollout_samples(tiny_model_dir, tokenizer)
    for s, adv in zip(samples, (1.0, -0.5, 0.7)):
        s.advantage = adv
    cfg = TrainerCommonConfig()
    cfg.optim.lr = 1e-2
    cfg.max_token_len_per_micro_batch = 60  # several micro-batches into the one step
    twin = copy.deepcopy(model)
    reused = PolicyTrainer(model, tokenizer.pad_token_id, cfg)
    separate = PolicyTrainer(twin, tokenizer.pad_token_id, cfg)
    assert reused.one_step_per_batch()
    monkeypatch.setattr(separate, "one_step_per_batch", lambda: False)
    passes = []
    monkeypatch.setattr(reused, "_logprobs", lambda *a: passes.append(a) or {})
    m_reused = reused.update(samples, temperature=0.8)
    m_separate = separate.update(samples, temperature=0.8)
    assert not passes  # no separate old-policy pass
    assert m_reused["actor/ratio_mean"] == 1.0 and m_reused["actor/micro_batches"] > 1
    assert m_reused["actor/pg_loss"] == pytest.approx(m_separate["actor/pg_loss"], abs=1e-5)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
