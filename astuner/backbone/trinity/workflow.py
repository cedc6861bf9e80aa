"""astuner's Workflow as a Trinity-RFT workflow (named in the generated config by this dotted path).

Trinity runs one instance per episode: we rebuild the run's config and plug-ins (cached per process),
wrap Trinity's OpenAI-compatible client as our engine (token ids and log-probs come from its vLLM
server), run the episode through the same rollout manager as the debug backbone (ModelTuner, judge,
madness, context tracker; the auxiliary models over the engines Trinity serves them on), and hand back one
Trinity `Experience` per sample.
"""

from __future__ import annotations

from typing import Any, Optional

from trinity.common.experience import EID, Experience
from trinity.common.workflows.workflow import Workflow as TrinityWorkflow

from astuner.backbone.run_health import report
from astuner.backbone.runtime import cached_tokenizer, load_saved_run, task_from_row
from astuner.backbone.trinity.engine import TrinityEngine, learning_policies
from astuner.backbone.trinity.operators import FAILED, TASK
from astuner.model.auxiliary import config_auxiliary_models, served_locally
from astuner.model.engines.openai_engine import OpenAIClientEngine
from astuner.rollout.manager import EpisodeResult, RolloutManager


def group_of(cfg: Any, task_id: str, sample: Any) -> tuple[str, str]:
    """(eid.task, eid.suffix) of a sample's experience. Trinity's GRPO groups by eid.task: with several policies a
    group is one policy's samples of the task (`<task>/<policy>`), with `algorithm.adv_group: agent` one agent's
    (`<task>/<policy>/<agent>`); the suffix names the policy for the trainer's split (lora_policies.policy_rows)."""
    if not cfg.policies and cfg.trainer_common.algorithm.adv_group != "agent":
        return "", ""  # Trinity's own: the task's id, a unique suffix
    policy = sample.policy if cfg.policies else ""
    parts = [task_id, policy] + ([sample.agent] if cfg.trainer_common.algorithm.adv_group == "agent" else [])
    return "/".join(parts), policy


def episode_to_experiences(episode: EpisodeResult, cfg: Any = None, task_id: str = "") -> list[Any]:
    """One Experience per sample: tokens = prompt + response part, action_mask = loss mask (1 on tokens
    the model generated), log-probs over the response part, the episode's reward. A failed episode that is not
    trained (rollout.failure_reward null) is one marker that trains nothing (`FAILED`, a one-token response with
    no loss mask): its group is short of it, which `operators.ShortGroups` acts on (rollout.short_group), and
    Trinity's rollout metrics count it (reward 0, failed 1) as the debug backbone's do."""
    metrics = {"reward": float(episode.reward), "is_success": float(episode.is_success),
               "failed": float(episode.failed), "mad": float(bool(episode.mad_reasons)),
               "calls": float(len(episode.recorder.calls)),
               "tool_parse_failures": float(episode.tool_parse_failures), **episode.metrics}
    info = {"task_id": episode.task.task_id, "episode_uuid": episode.episode_uuid, "error": episode.error,
            "madness": list(episode.mad_reasons)}
    if episode.failed and not episode.samples:
        return [Experience(eid=EID(step=0), tokens=[0, 0], prompt_length=1, logprobs=[0.0], action_mask=[False],
                           reward=0.0, info={**info, FAILED: True, "num_calls": 0, "truncated": False},
                           metrics=dict(metrics))]
    out = []
    for step, sample in enumerate(episode.samples):
        task, suffix = group_of(cfg, task_id, sample) if cfg is not None else ("", "")
        eid = EID(step=step, task=task, suffix=suffix) if task else EID(step=step)
        if task:  # a part of the task's episodes: ShortGroups finds the task (operators.task_of)
            info = {**info, TASK: task_id}
        out.append(Experience(
            eid=eid, tokens=sample.input_ids, prompt_length=sample.prompt_length,
            logprobs=sample.logprobs, action_mask=[bool(m) for m in sample.loss_mask], reward=float(sample.reward),
            info={**info, "num_calls": sample.num_calls, "truncated": sample.truncated},
            metrics=dict(metrics)))
    return out


class AstunerTrinityWorkflow(TrinityWorkflow):
    can_reset: bool = False
    can_repeat: bool = False
    is_async: bool = True

    def __init__(self, *, task: Any, model: Any, auxiliary_models: Optional[list[Any]] = None):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        args = dict(task.workflow_args or {})
        self.cfg, self.workflow, self.judge = load_saved_run(args["astuner_config"],
                                                             tuple(args.get("astuner_roots", [])))
        self.mode = args.get("mode", "train")
        # the bound a Trinity trainer step's fixed size gives an episode (translate.samples_per_episode)
        self.cfg.rollout.multi_turn.max_sample_per_task = args.get("max_samples",
                                                                   self.cfg.rollout.multi_turn.max_sample_per_task)

    def auxiliary(self) -> dict[str, Any]:
        """The run's auxiliary models as chat models by name: those with a folder over the engines Trinity's
        explorer serves them on (`explorer.auxiliary_models`, in `served_locally`'s order), endpoints direct."""
        served = {}
        for name, wrapper in zip(served_locally(self.cfg), self.auxiliary_model_wrappers or []):
            client = wrapper.get_openai_async_client()
            path = getattr(client, "model_path", None) or self.cfg.auxiliary_models[name].path
            served[name] = (OpenAIClientEngine(client, path), path)
        return config_auxiliary_models(self.cfg, [], served)

    async def run_async(self) -> list[Any]:
        engines = {}
        if self.cfg.policies:  # LoRA adapters of one base: each policy's calls with its own (lora_policies)
            learners = learning_policies(self.cfg)
            engines = {name: TrinityEngine(self.model, name, learners) if name in learners
                       else TrinityEngine(self.model, base=True) for name in self.cfg.policies}
            engine = engines[learners[0]]
        elif self.cfg.model.lora is not None:  # the adapter being trained rides on the engine's own calls only
            engine = TrinityEngine(self.model)
        else:
            client = self.model.get_openai_async_client()
            engine = OpenAIClientEngine(client, getattr(client, "model_path", None) or self.cfg.model.path)
        tokenizer = cached_tokenizer(self.cfg.model.path)
        manager = RolloutManager(self.cfg, self.workflow, self.judge, engine, tokenizer,
                                 auxiliary_models=self.auxiliary(), engines=engines)
        batch = await manager.run([task_from_row(self.task.raw_task)], mode=self.mode, num_repeat=1,
                                  check_error_rate=False)
        episode = batch.episodes[0]
        report(self.mode, self.task.batch_id, episode)  # the run's failure count and row problems
        return episode_to_experiences(episode, self.cfg, str(self.task.task_id))

    def run(self) -> list[Any]:
        raise RuntimeError("AstunerTrinityWorkflow is asynchronous; Trinity calls run_async()")
