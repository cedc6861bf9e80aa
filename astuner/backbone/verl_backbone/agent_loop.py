"""astuner's Workflow as a verl agent loop (`astuner_agent`, registered through the
`agent_loop_config_path` file the verl backbone writes).

verl builds one loop per sample and calls `run(sampling_params, **row)`. We rebuild the run's config
and plug-ins (cached per worker), wrap verl's server manager as our engine (token ids in, token ids
and log-probs out), run the episode through the same rollout manager as the debug backbone
(ModelTuner, judge, madness, context tracker), and return verl `AgentLoopOutput`s: the first prompt as
`prompt_ids`, everything after it as `response_ids` with mask 1 on generated tokens and 0 on tool
results, the engine's log-probs (0.0 on mask-0 tokens), and our judge's reward as `reward_score`.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from astuner.backbone.runtime import load_saved_run, task_from_row
from astuner.rollout.engines.base import GenerateResult, SamplingParams
from astuner.rollout.manager import EpisodeResult, RolloutManager


class VerlServerEngine:
    """Our engine protocol over verl's `LLMServerClient.generate(request_id, prompt_ids=, sampling_params=)`."""

    def __init__(self, server_manager: Any):
        self.server_manager = server_manager

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        params = {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_tokens,
                  "logprobs": True, "repetition_penalty": 1.0}
        out = await self.server_manager.generate(uuid.uuid4().hex, prompt_ids=list(prompt_ids), sampling_params=params)
        token_ids = list(out.token_ids)
        if out.log_probs is None or len(out.log_probs) != len(token_ids):
            raise RuntimeError("verl's rollout server returned no log-probs; set "
                               "actor_rollout_ref.rollout.calculate_log_probs=true")
        finish = "length" if (out.stop_reason == "length" or len(token_ids) >= sampling.max_tokens) else "stop"
        return GenerateResult(token_ids, [float(x) for x in out.log_probs], finish)

    async def update_weights(self, state_dict: Any) -> None:
        return None  # verl syncs its rollout servers itself


def episode_to_outputs(episode: EpisodeResult, response_length: int) -> list[Any]:
    outputs = []
    for sample in episode.samples:
        response = sample.response_ids[:response_length]
        outputs.append(AgentLoopOutput(
            prompt_ids=sample.prompt_ids, response_ids=response, response_mask=sample.loss_mask[:len(response)],
            response_logprobs=sample.logprobs[:len(response)], reward_score=float(sample.reward),
            num_turns=2 * sample.num_calls, metrics={},
            extra_fields={"reward_extra_info": {"is_success": float(episode.is_success),
                                                "failed": float(episode.failed),
                                                "mad": float(bool(episode.mad_reasons))}}))
    return outputs


class AstunerAgentLoop(AgentLoopBase):
    def __init__(self, *args: Any, astuner_config: str, astuner_roots: list[str] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cfg, self.workflow, self.judge = load_saved_run(astuner_config, tuple(astuner_roots))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        extra = kwargs.get("extra_info") or {}
        task = task_from_row(extra)
        sampling = SamplingParams(temperature=float(sampling_params.get("temperature", 1.0)),
                                  top_p=float(sampling_params.get("top_p", 1.0)),
                                  max_tokens=self.cfg.rollout.max_response_length_in_one_turn)
        manager = RolloutManager(self.cfg, self.workflow, self.judge, VerlServerEngine(self.server_manager),
                                 self.tokenizer)
        batch = await manager.run([task], num_repeat=1, check_error_rate=False, sampling=sampling)
        episode = batch.episodes[0]
        outputs = episode_to_outputs(episode, int(self.rollout_config.response_length))
        if not outputs:  # the episode made no model call (it failed first): one empty, zero-masked sample
            prompt = self.tokenizer.encode(task.main_query or " ", add_special_tokens=False)
            outputs = [AgentLoopOutput(prompt_ids=prompt, response_ids=[self.tokenizer.eos_token_id],
                                       response_mask=[0], response_logprobs=[0.0], reward_score=float(episode.reward),
                                       num_turns=0, metrics={}, extra_fields={"reward_extra_info": {}})]
        return outputs if len(outputs) > 1 else outputs[0]
