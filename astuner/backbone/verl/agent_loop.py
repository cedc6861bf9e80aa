"""astuner's Workflow as a verl agent loop (`astuner_agent`, registered through the
`agent_loop_config_path` file the verl backbone writes).

verl builds one loop per dataset row and calls `run(sampling_params, **row)`. We rebuild the run's config
and plug-ins (cached per worker), wrap verl's server manager as our engine (token ids in, token ids and
log-probs out), run the episode through the same rollout manager as the debug backbone (ModelTuner,
judge, madness, context tracker), and return one verl `AgentLoopOutput`: the first prompt as
`prompt_ids`, everything after it as `response_ids` with mask 1 on generated tokens and 0 on tool
results, the engine's log-probs (0.0 on mask-0 tokens), and our judge's reward as `reward_score`.

Rules verl 0.9 imposes, and what we do about them (`episode_to_output`):
- exactly one output per row: an episode whose calls merged into one sample (the usual case) is sent
  whole; when its context broke the prefix and it made several samples, the one with the most trained
  tokens is sent and the others are counted (`dropped_samples`);
- prompts and responses are padded, never cut, by verl: a prompt over `rollout.prompt_length` keeps its
  last tokens and is not trained on (mask 0), a response over `rollout.response_length` is cut; both are
  counted (`truncated`);
- every output carries the same `reward_extra_info` keys (`EXTRA_KEYS`), also an episode that made no
  model call (it failed first), which is sent as one untrained token.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from astuner.backbone.run_health import report
from astuner.backbone.verl.auxiliary import served
from astuner.backbone.runtime import load_saved_run, task_from_row
from astuner.backbone.verl.translate import MODE_KEY
from astuner.model.auxiliary import config_auxiliary_models
from astuner.model.engines.base import GenerateResult, SamplingParams
from astuner.rollout.manager import EpisodeResult, RolloutManager

EXTRA_KEYS = ("is_success", "failed", "mad", "num_samples", "dropped_samples", "truncated", "tool_parse_failures",
              "auxiliary_calls", "group_dropped")


class VerlServerEngine:
    """Our engine protocol over verl's `LLMServerClient.generate(request_id, prompt_ids=, sampling_params=)`.

    verl's vLLM server reports "completed" both for a reply that ended and for one cut at `max_tokens`,
    so a reply is "length" when it filled `max_tokens` without ending on a stop token."""

    def __init__(self, server_manager: Any, stop_token_ids: list[int]):
        self.server_manager = server_manager
        self.stop_token_ids = set(stop_token_ids)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        params = {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_tokens,
                  "logprobs": True, "repetition_penalty": 1.0}
        out = await self.server_manager.generate(uuid.uuid4().hex, prompt_ids=list(prompt_ids), sampling_params=params)
        if out.stop_reason == "aborted":
            raise RuntimeError("verl's rollout server aborted the request")
        token_ids = list(out.token_ids)
        if out.log_probs is None or len(out.log_probs) != len(token_ids):
            raise RuntimeError("verl's rollout server returned no log-probs for the reply")
        cut = len(token_ids) >= sampling.max_tokens and (not token_ids or token_ids[-1] not in self.stop_token_ids)
        return GenerateResult(token_ids, [float(x) for x in out.log_probs], "length" if cut else "stop")

    async def update_weights(self, state_dict: Any) -> None:
        return None  # verl syncs its rollout servers itself


def episode_to_output(episode: EpisodeResult, prompt_length: int, response_length: int,
                      fallback_prompt: list[int], fallback_token: int) -> AgentLoopOutput:
    """The one AgentLoopOutput verl takes for an episode (rules in the module docstring)."""
    extra = {"is_success": float(episode.is_success), "failed": float(episode.failed),
             "mad": float(bool(episode.mad_reasons)), "num_samples": float(len(episode.samples)),
             "dropped_samples": float(max(0, len(episode.samples) - 1)), "truncated": 0.0,
             "tool_parse_failures": float(episode.tool_parse_failures),
             "auxiliary_calls": float(episode.metrics.get("auxiliary_calls", 0.0)),
             "group_dropped": 0.0}  # 1 when its group was short of a failed episode (short_groups.py)
    if not episode.samples:
        return AgentLoopOutput(prompt_ids=fallback_prompt[-prompt_length:], response_ids=[fallback_token],
                               response_mask=[0], response_logprobs=[0.0], reward_score=float(episode.reward),
                               num_turns=0, metrics={}, extra_fields={"reward_extra_info": extra})
    # the most trained tokens; on a tie the later sample (it holds the episode's end)
    sample = max(reversed(episode.samples), key=lambda s: sum(s.loss_mask))
    prompt, response = sample.prompt_ids, sample.response_ids
    mask, logprobs = list(sample.loss_mask), list(sample.logprobs)
    truncated = sample.truncated
    if len(prompt) > prompt_length:
        prompt, mask, truncated = prompt[-prompt_length:], [0] * len(mask), True
    if len(response) > response_length:
        response, mask, logprobs, truncated = (response[:response_length], mask[:response_length],
                                               logprobs[:response_length], True)
    extra["truncated"] = float(truncated)
    return AgentLoopOutput(prompt_ids=prompt, response_ids=response, response_mask=mask, response_logprobs=logprobs,
                           reward_score=float(sample.reward), num_turns=2 * sample.num_calls, metrics={},
                           extra_fields={"reward_extra_info": extra})


class AstunerAgentLoop(AgentLoopBase):
    def __init__(self, *args: Any, astuner_config: str, astuner_roots: list[str] = (), **kwargs: Any):
        from astuner.model.engines.hf import stop_token_ids_of

        super().__init__(*args, **kwargs)
        self.cfg, self.workflow, self.judge = load_saved_run(astuner_config, tuple(astuner_roots))
        self.stop_token_ids = stop_token_ids_of(self.tokenizer)
        # the auxiliary models: folders on the run's engine actors (auxiliary.py), endpoints direct
        self.auxiliary_models = config_auxiliary_models(self.cfg, [], served(self.cfg)) \
            if self.cfg.auxiliary_models else {}

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = kwargs.get("extra_info") or {}
        task = task_from_row(extra)
        sampling = SamplingParams(temperature=float(sampling_params.get("temperature", 1.0)),
                                  top_p=float(sampling_params.get("top_p", 1.0)),
                                  max_tokens=self.cfg.rollout.max_response_length_in_one_turn)
        manager = RolloutManager(self.cfg, self.workflow, self.judge,
                                 VerlServerEngine(self.server_manager, self.stop_token_ids), self.tokenizer,
                                 auxiliary_models=self.auxiliary_models)
        mode = extra.get(MODE_KEY, "train")
        batch = await manager.run([task], mode=mode, num_repeat=1, check_error_rate=False, sampling=sampling)
        report(mode, None, batch.episodes[0])  # the run's failure count and row problems (verl's steps: in order)
        fallback_prompt = self.tokenizer.encode(task.query_or_none or " ", add_special_tokens=False) or [
            self.stop_token_ids[0]]
        return episode_to_output(batch.episodes[0], int(self.rollout_config.prompt_length),
                                 int(self.rollout_config.response_length), fallback_prompt, self.stop_token_ids[0])
