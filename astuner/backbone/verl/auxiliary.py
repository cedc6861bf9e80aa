"""verl: the auxiliary models that are folders, each on a vLLM engine of its own in the run's Ray cluster.

verl serves only the model it trains. Each `astuner.auxiliary_models` folder gets a Ray actor, named
`astuner_auxiliary_<name>` in the job's namespace and holding one GPU (a logical one in the CPU mode), that runs
astuner's in-process vLLM engine (`model/engines/vllm_engine.py`: token ids in, token ids and log-probs out). The
driver starts them as verl's task runner starts (`backbone.HealthyRunner`), before verl places its own workers;
the agent loop, in whichever verl worker it runs, finds them by name and hands the workflow and the judge a
`FrozenChatModel` over each (`model/auxiliary.py`), exactly as the debug backbone does over its hf engine.
They are owned by the driver and end with it.
"""

from __future__ import annotations

from typing import Any

from astuner.model.engines.base import GenerateResult, SamplingParams

PREFIX = "astuner_auxiliary_"
_FOUND: dict[tuple[str, str], Any] = {}  # (namespace, name) -> actor handle, per worker process


class AuxiliaryEngine:
    """One auxiliary model's vLLM engine (the body of the Ray actor)."""

    def __init__(self, path: str, max_model_len: int, max_num_seqs: int, seed: int, gpu_memory_utilization: float):
        from astuner.model.engines.vllm_engine import VLLMEngine

        self.path = path
        self.engine = VLLMEngine(path, max_model_len, max_num_seqs, 1, seed, gpu_memory_utilization)

    def folder(self) -> str:
        return self.path

    async def generate(self, prompt_ids: list[int], temperature: float, top_p: float,
                       max_tokens: int) -> tuple[list[int], list[float], str]:
        out = await self.engine.generate(prompt_ids, SamplingParams(temperature, top_p, max_tokens))
        return out.token_ids, out.logprobs, out.finish_reason


class ActorEngine:
    """Our engine protocol over an `AuxiliaryEngine` actor."""

    def __init__(self, actor: Any):
        self.actor = actor

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        ids, logprobs, finish = await self.actor.generate.remote(list(prompt_ids), sampling.temperature,
                                                                 sampling.top_p, sampling.max_tokens)
        return GenerateResult(list(ids), list(logprobs), finish)

    async def update_weights(self, state_dict: Any) -> None:
        return None  # frozen


def start(run: Any, namespace: str) -> list[Any]:
    """One engine actor per auxiliary folder (a tiny model created first), ready when this returns; the handles
    keep them alive (the driver holds them for the run)."""
    import ray

    from astuner.backbone.translate_common import auxiliary_folders

    ro = run.astuner.rollout
    actors = []
    for name, path in auxiliary_folders(run, create=True).items():
        entry = run.astuner.auxiliary_models[name]
        actor = ray.remote(AuxiliaryEngine).options(
            name=PREFIX + name, namespace=namespace, num_gpus=1, max_concurrency=max(16, ro.max_num_seqs * 2)
        ).remote(path, entry.max_model_len, ro.max_num_seqs, ro.seed, ro.gpu_memory_utilization)
        actors.append(actor)
    ray.get([actor.folder.remote() for actor in actors])  # each engine up (or its error raised here)
    return actors


def served(run: Any) -> dict[str, tuple[Any, str]]:
    """In a verl worker: name -> (engine over the run's actor, the folder it serves), for `config_auxiliary_models`."""
    import ray

    from astuner.model.auxiliary import served_locally

    namespace = ray.get_runtime_context().namespace
    out = {}
    for name in served_locally(run):
        key = (namespace, name)
        if key not in _FOUND:
            actor = ray.get_actor(PREFIX + name, namespace=namespace)
            _FOUND[key] = (ActorEngine(actor), ray.get(actor.folder.remote()))
        out[name] = _FOUND[key]
    return out
