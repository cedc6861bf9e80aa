"""The batched transformers engine: log-probs equal a plain forward pass, batching happens, limits hold."""

from __future__ import annotations

import asyncio

import pytest
import torch

from astuner.model.engines.base import SamplingParams
from astuner.model.engines.hf import HFEngine
from astuner.model.engines.sampling import sample_next


@pytest.fixture(scope="module")
def engine(tiny_model_dir, tokenizer):
    return HFEngine.from_pretrained(str(tiny_model_dir), tokenizer, max_num_seqs=16, batch_wait_ms=20, seed=1)


def prompt(tokenizer, text):
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             tokenize=False)
    return tokenizer.encode(rendered, add_special_tokens=False)


def reference_logprobs(model, prompt_ids, token_ids, temperature):
    ids = torch.tensor([prompt_ids + token_ids], device=model.device)  # the engine's device: cuda on a GPU
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1: -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, ids[0, len(prompt_ids):, None]).squeeze(-1).tolist()


def test_logprobs_match_unpadded_forward_for_left_padded_batch(engine, tokenizer):
    prompts = [prompt(tokenizer, "What is 2+3?"), prompt(tokenizer, "A much longer question about clips sold in May")]
    sampling = SamplingParams(temperature=0.7, top_p=1.0, max_tokens=12)

    async def both():
        return await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])

    batches_before = engine.stats["batches"]
    results = asyncio.run(both())
    assert engine.stats["batches"] - batches_before == 1  # served together, left-padded
    for p, r in zip(prompts, results):
        assert len(r.token_ids) == len(r.logprobs) and 0 < len(r.token_ids) <= 12
        ref = reference_logprobs(engine.model, p, r.token_ids, 0.7)
        assert r.logprobs == pytest.approx(ref, abs=2e-4)


def test_greedy_is_deterministic_and_reports_plain_logprobs(engine, tokenizer):
    p = prompt(tokenizer, "Reply with one number.")
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    a = asyncio.run(engine.generate(p, greedy))
    b = asyncio.run(engine.generate(p, greedy))
    assert a.token_ids == b.token_ids
    assert a.logprobs == pytest.approx(reference_logprobs(engine.model, p, a.token_ids, 1.0), abs=2e-4)


def test_concurrent_requests_are_batched(engine, tokenizer):
    p = prompt(tokenizer, "guess a number")

    async def many():
        return await asyncio.gather(*[engine.generate(p, SamplingParams(1.0, 0.9, 4)) for _ in range(32)])

    before = dict(engine.stats)
    results = asyncio.run(many())
    assert len(results) == 32 and all(len(r.token_ids) <= 4 for r in results)
    batches = engine.stats["batches"] - before["batches"]
    assert batches <= 4  # 32 requests at max_num_seqs=16: two full batches (plus stragglers at most)


def test_max_tokens_and_finish_reason(engine, tokenizer):
    result = asyncio.run(engine.generate(prompt(tokenizer, "hello"), SamplingParams(1.0, 1.0, 3)))
    assert len(result.token_ids) <= 3
    if len(result.token_ids) == 3 and result.token_ids[-1] not in engine.stop_token_ids:
        assert result.finish_reason == "length"
    else:
        assert result.finish_reason == "stop"


def test_sample_next_rows_use_their_own_settings():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 3)
    temperature = torch.tensor([0.0, 1.0, 1.0])
    top_p = torch.tensor([1.0, 1.0, 0.5])
    generator = torch.Generator().manual_seed(0)
    seen = {1: set(), 2: set()}
    for _ in range(200):
        tokens, lps = sample_next(logits, temperature, top_p, generator)
        assert tokens[0].item() == 0  # greedy row
        assert lps[0].item() == pytest.approx(torch.log_softmax(logits[0], -1)[0].item())
        seen[1].add(tokens[1].item())
        seen[2].add(tokens[2].item())
        assert lps[2].item() == pytest.approx(0.0)  # nucleus of one token (p0 = 0.64 >= 0.5): prob 1
    assert seen[1] == {0, 1, 2, 3} and seen[2] == {0}


def test_sample_next_draws_from_the_nucleus_with_a_cpu_generator_for_any_device():
    """The draw: uniforms from the engine's CPU generator, moved to the logits' device, inverse CDF over the
    renormalised nucleus. Frequencies match it, a seed gives the same tokens, and the same lines run for
    logits on another device (meta here, as CUDA on a GPU) with the CPU generator."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 20000)
    ones, nucleus_p = torch.ones(20000), torch.full((20000,), 0.9)
    tokens, _ = sample_next(logits, ones, ones, torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=4) / 20000
    assert torch.allclose(freq, torch.softmax(logits[0], -1), atol=0.01)
    tokens, lps = sample_next(logits, ones, nucleus_p, torch.Generator().manual_seed(0))
    nucleus = torch.softmax(logits[0], -1)[:3] / torch.softmax(logits[0], -1)[:3].sum()  # 0.64+0.24 < 0.9
    assert torch.allclose((torch.bincount(tokens, minlength=4) / 20000)[:3], nucleus, atol=0.01)
    assert (tokens != 3).all() and torch.allclose(lps, nucleus.log()[tokens])
    again, _ = sample_next(logits, ones, nucleus_p, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, again)
    meta = torch.device("meta")
    out, lp = sample_next(logits[:4].to(meta), ones[:4].to(meta), nucleus_p[:4].to(meta),
                          torch.Generator().manual_seed(0))
    assert out.device == meta and lp.device == meta and out.shape == (4,)


def agent_prompt(tokenizer, question):
    """A prompt as an agent's: a long system message every episode shares, then its own question."""
    system = "You are a careful agent. Call the tool first, read its result, then answer in a box. " * 2
    rendered = tokenizer.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": question}],
                                             add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(rendered, add_special_tokens=False)


def test_shared_prompt_prefix_is_computed_once_and_changes_no_logprob(engine, tokenizer):
    questions = ["What is 2+3?", "What does sensor 17 read today, please?", "What is 2+3?", "hi"]
    prompts = [agent_prompt(tokenizer, q) for q in questions]
    sampling = SamplingParams(temperature=0.8, top_p=1.0, max_tokens=10)

    async def together():
        return await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])

    before = dict(engine.stats)
    results = asyncio.run(together())
    assert engine.stats["batches"] - before["batches"] == 1
    common = next(i for i, pair in enumerate(zip(*prompts)) if len(set(pair)) > 1)
    assert engine.stats["shared_prefix_tokens"] - before["shared_prefix_tokens"] == common * (len(prompts) - 1)
    for p, r in zip(prompts, results):  # rests of different lengths, padded between prefix and rest
        assert r.token_ids
        assert r.logprobs == pytest.approx(reference_logprobs(engine.model, p, r.token_ids, 0.8), abs=2e-4)


def test_finished_rows_leave_the_batch_and_the_rest_decode_unchanged(engine, tokenizer):
    prompts = [prompt(tokenizer, f"question number {i}") for i in range(4)]
    limits = [1, 1, 1, 9]  # three rows stop after one token, one goes on
    top_ps = [0.9, 0.9, 0.9, 1.0]  # the last row's log-probs are then under the full softmax

    async def together():
        return await asyncio.gather(*[engine.generate(p, SamplingParams(1.0, t, n))
                                      for p, t, n in zip(prompts, top_ps, limits)])

    engine.stop_token_ids, saved = set(), engine.stop_token_ids  # only the limits end rows here
    try:
        before = dict(engine.stats)
        results = asyncio.run(together())
    finally:
        engine.stop_token_ids = saved
    assert engine.stats["compactions"] - before["compactions"] >= 1
    assert [len(r.token_ids) for r in results] == limits
    assert [r.finish_reason for r in results] == ["length"] * 4
    # the row left alone decodes from its own cache: its log-probs are those of a plain forward pass
    assert results[3].logprobs == pytest.approx(reference_logprobs(engine.model, prompts[3], results[3].token_ids, 1.0),
                                                abs=2e-4)


def test_shared_prefix_length():
    from astuner.model.engines.hf import shared_prefix_length

    base = list(range(40))
    assert shared_prefix_length([base + [1], base + [2, 3]], 16) == 40
    assert shared_prefix_length([base, base], 16) == 39  # identical prompts keep one token of their own
    assert shared_prefix_length([base + [1]], 16) == 0  # a single prompt: nothing to share
    assert shared_prefix_length([base[:10] + [1], base[:10] + [2]], 16) == 0  # too short to pay off
    assert shared_prefix_length([[5] + base, base], 16) == 0


def test_a_seeded_request_samples_the_same_tokens_whatever_it_is_batched_with(engine, tokenizer):
    """A request's own seed: its tokens and log-probs do not depend on the other rows of its batch, on their order,
    nor on what the engine's generator drew before (thread timing decides all three in a run)."""
    mine = prompt(tokenizer, "Tell me about sensors and their readings")
    others = [prompt(tokenizer, f"question number {i} about something else") for i in range(5)]
    seeded = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=16, seed=1234)
    plain = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=16)

    async def batch(order):
        return await asyncio.gather(*[engine.generate(p, seeded if p is mine else plain) for p in order])

    alone = asyncio.run(engine.generate(mine, seeded))
    engine.generator.manual_seed(99)
    first = asyncio.run(batch([mine, *others]))[0]
    engine.generator.manual_seed(7)
    last = asyncio.run(batch([*others[:3], mine]))[-1]
    assert alone.token_ids == first.token_ids == last.token_ids and len(alone.token_ids) > 3
    assert first.logprobs == pytest.approx(alone.logprobs, abs=2e-4)
    other_seed = asyncio.run(engine.generate(mine, SamplingParams(1.0, 0.9, 16, seed=4321)))
    assert other_seed.token_ids != alone.token_ids  # the seed is what chose them
