"""Run episodes: `num_repeat` per task (one group per task), at most `max_env_worker` at once.

Each episode gets its own `ModelTuner` (sharing the engine) and recorder. An episode that raises or
times out is recorded as failed, with its traceback in the log (one whose task's row lacks what the workflow or
judge read: that one line, once per task, `row_problems`); it is not trained on (no samples) unless
`rollout.failure_reward` gives it a reward;
the step goes on unless more than `rollout.max_error_rate` of its episodes failed.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import statistics
import time
import traceback
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from loguru import logger

from astuner.config.schema import AstunerConfig
from astuner.rollout.madness import madness_reasons
from astuner.rollout.tracker import TrackerStats, build_samples
from astuner.errors import UserError
from astuner.model.engines.base import Engine, SamplingParams, derived_seed
from astuner.rollout import descriptors
from astuner.rollout.gc_freeze import objects_frozen
from astuner.rollout.row_problems import PROCESS, RowProblems, one_line, row_problem
from astuner.rollout.threads import run_in_own_thread
from astuner.schema import Sample, Task, WorkflowOutput, WorkflowTask
from astuner.schema.output import as_workflow_output
from astuner.task_judge.base import BaseJudge
from astuner.task_judge.run_judge import judge_episode, overall_reward, task_as_dict
from astuner.model.policies import policy_map
from astuner.schema.calls import EpisodeRecorder


class RolloutFailed(UserError):
    """Too many episodes of one step failed."""


ONE_LINE = 280  # a user error's line (after "astuner: error: ") stays within 300 characters


@dataclass
class EpisodeResult:
    task: Task
    repeat_index: int
    episode_uuid: str
    reward: float = 0.0  # the episode's reward (with one per agent or policy: their mean)
    rewards: dict[str, float] = field(default_factory=dict)  # {agent or policy: reward} when given per agent
    is_success: bool = False
    failed: bool = False
    error: Optional[str] = None
    row_problem: Optional[Any] = field(default=None, repr=False)  # failed on its row (RowLacks): the error's line
    mad_reasons: list[str] = field(default_factory=list)
    output: Optional[WorkflowOutput] = None
    recorder: EpisodeRecorder = field(default_factory=EpisodeRecorder)
    samples: list[Sample] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    text_metrics: dict[str, str] = field(default_factory=dict)  # the workflow's non-numeric metrics, as text
    duration_s: float = 0.0
    attempts: int = 1  # runs of the episode: 1 + its retries (rollout.episode_retries)
    group_dropped: bool = False  # its task's group was short of episodes and left the step (rollout.short_group)

    @property
    def tool_parse_failures(self) -> int:
        """Tool calls in this episode's replies that did not parse (or named a tool that was not offered)."""
        return sum(len(c.tool_call_errors) for c in self.recorder.calls)


@dataclass
class RolloutBatch:
    episodes: list[EpisodeResult]
    metrics: dict[str, float]

    @property
    def samples(self) -> list[Sample]:
        return [s for e in self.episodes for s in e.samples]

    def groups(self) -> dict[str, list[EpisodeResult]]:
        out: dict[str, list[EpisodeResult]] = {}
        for e in self.episodes:
            out.setdefault(e.task.task_id, []).append(e)
        return out


_WARNED_TEXT: set[str] = set()  # metric keys already warned about in this process


def split_metrics(metrics: Any, prefix: str = "") -> tuple[dict[str, float], dict[str, str]]:
    """A workflow's metrics as numbers (aggregated) and, for values that are not numbers, as text (recorded with
    the episode, left out of the means); each text key is warned about once per process."""
    numbers: dict[str, float] = {}
    texts: dict[str, str] = {}
    for key, value in dict(metrics or {}).items():
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError("text")  # float("3") would take a numeral string for a number
            numbers[f"{prefix}{key}"] = float(value)  # numbers, booleans, numpy scalars, 0-d tensors
        except (TypeError, ValueError):
            texts[str(key)] = value if isinstance(value, str) else repr(value)
            if key not in _WARNED_TEXT:
                _WARNED_TEXT.add(key)
                logger.warning(f"workflow metric {key!r} is not a number ({texts[str(key)][:60]!r}): kept as text in "
                               f"the trajectories, left out of the metrics' means")
    return numbers, texts


def build_judge(judge_plugin: Any, cfg: AstunerConfig) -> Any:
    """A judge class is instantiated once per run with the config; a judge function is used as it is."""
    if inspect.isclass(judge_plugin) and issubclass(judge_plugin, BaseJudge):
        return judge_plugin(cfg)
    return judge_plugin


class RolloutManager:
    def __init__(self, cfg: AstunerConfig, workflow: Any, judge: Any, engine: Engine, tokenizer: Any,
                 auxiliary_models: Optional[dict[str, Any]] = None, env_client: Any = None,
                 engines: Optional[dict[str, Engine]] = None, row_problems: Optional[RowProblems] = None,
                 tuner: Optional[Any] = None, builds_samples: bool = True):
        """`tuner`: what builds each episode's model (ModelTuner's signature; default ModelTuner); `builds_samples`
        False: episodes keep their calls but no training samples (an evaluation of a model that returns no ids)."""
        self.cfg, self.workflow, self.judge = cfg, workflow, judge
        self.tuner, self.builds_samples = tuner, builds_samples
        # tasks whose rows failed their episodes: the run's (debug), else this process's (a manager per episode)
        self.row_problems = row_problems if row_problems is not None else PROCESS
        self.engine, self.tokenizer = engine, tokenizer
        descriptors.raise_soft_limit()  # once per process: episodes' connections count against it
        self.auxiliary_models = auxiliary_models or {}
        self.env_client = env_client
        self._env_clients: dict[str, Any] = {}
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        targets = cfg.rollout.trainable_targets
        self.trainable_targets = targets if targets is not None else getattr(workflow, "trainable_targets", None)
        self.policies = policy_map(cfg, workflow)  # which policy serves which agent (astuner.model.policies)
        if cfg.policies and getattr(workflow, "trainable_targets", None) is not None:
            logger.warning(f"{getattr(workflow, '__name__', 'the workflow')}.trainable_targets is not used with "
                           f"astuner.policies: astuner.rollout.agent_policy says which agents learn")
        self.engines = dict(engines or {})  # each policy's engine (None: `engine` serves the one policy)
        from astuner.model.chat.tool_parser import resolve_format, resolve_reasoning

        # the replies' tool-call format (auto: from the chat template) and thinking, once for the run
        self.reply_format = (resolve_format(cfg.rollout.tool_call_parser, tokenizer),
                             resolve_reasoning(cfg.rollout.reasoning_parser))

    def sampling(self, mode: str) -> SamplingParams:
        ro = self.cfg.rollout
        if mode == "val":
            return SamplingParams(ro.val_kwargs.temperature, ro.val_kwargs.top_p, ro.max_response_length_in_one_turn)
        return SamplingParams(ro.temperature, ro.top_p, ro.max_response_length_in_one_turn)

    async def run(self, tasks: list[Task], mode: str = "train", num_repeat: Optional[int] = None,
                  tag: Optional[str] = None, check_error_rate: bool = True,
                  sampling: Optional[SamplingParams] = None,
                  on_episode: Optional[Any] = None, draws: Optional[str] = None) -> RolloutBatch:
        """Roll out every task `num_repeat` times (default: rollout.num_repeat, or val_kwargs.num_repeat).
        With a `tag` (unique per run and step) episode ids are derived from it, so a rerun is identical.
        `on_episode(result)` is called as each episode ends (its retries done): progress. Each episode samples from
        a seed of its own: from the run's seed (or `sampling`'s) and `draws` (the step's key within the run, such as
        "train:3": the same draws whatever the run is named) with the episode's place, else its id (with a tag)."""
        ro = self.cfg.rollout
        repeats = num_repeat or (ro.val_kwargs.num_repeat if mode == "val" else ro.num_repeat)
        sampling = sampling or self.sampling(mode)
        limit = asyncio.Semaphore(ro.max_env_worker)
        stats = TrackerStats()
        started = time.perf_counter()
        def episode_id(i: int, task: Task, r: int, attempt: int) -> str:
            if tag is None:
                return uuid.uuid4().hex
            again = f":retry{attempt}" if attempt else ""
            return uuid.uuid5(uuid.NAMESPACE_URL, f"astuner:{tag}:{i}:{task.task_id}:{r}{again}").hex

        base = ro.seed if sampling.seed is None else sampling.seed

        def episode(i: int, task: Task, r: int, attempt: int) -> tuple[str, Optional[int]]:
            """The episode's id and its sampling seed: its draws do not depend on which episodes an engine batches
            it with, nor on what the engine sampled before (thread timing). Without a tag (ids drawn at random)
            nor `draws`, the seed given, if any: none draws from the engine's generator."""
            uid = episode_id(i, task, r, attempt)
            if draws is None and tag is None:
                return uid, sampling.seed
            return uid, derived_seed(base, uid if draws is None else f"{draws}:{i}:{task.task_id}:{r}:{attempt}")

        jobs = [self._attempts(task, r, lambda attempt, i=i, task=task, r=r: episode(i, task, r, attempt),
                               sampling, limit, stats, on_episode)
                for i, task in enumerate(tasks) for r in range(repeats)]
        with objects_frozen():  # no full garbage-collector pass over the whole process stops the loop meanwhile
            episodes = list(await asyncio.gather(*jobs))
        descriptors.rollouts_ended()  # what the rollouts made is collected: a warning when descriptors run short
        short, dropped = self._short_groups(episodes, repeats, mode == "train")
        metrics = self._metrics(episodes, stats, time.perf_counter() - started)
        # failures without bias (rollout.episode_retries, rollout.short_group): the runs again, the tasks whose
        # groups stayed short of episodes after them, and those that left the step whole
        metrics.update({"rollout/retries": float(sum(e.attempts - 1 for e in episodes)),
                        "rollout/short_groups": float(short), "rollout/dropped_short_groups": float(dropped)})
        self._log_interventions(episodes, stats, mode)
        self._log_row_problems(episodes)
        failed = [e for e in episodes if e.failed]
        if check_error_rate and episodes and len(failed) / len(episodes) > ro.max_error_rate:
            first = (failed[0].error or "").strip().splitlines()
            said = (f"{len(failed)} of {len(episodes)} episodes failed ({len(failed) / len(episodes):.0%} > "
                    f"astuner.rollout.max_error_rate {ro.max_error_rate}); first error: ")
            tail = '' if failed[0].row_problem else ' (tracebacks in the log)'
            error = first[-1].strip() if first else 'unknown'
            room = max(ONE_LINE - len(said) - len(tail), 60)  # the whole error is in the log: the line stays one
            raise RolloutFailed(said + (error if len(error) <= room else error[:room - 3] + "...") + tail)
        return RolloutBatch(episodes=episodes, metrics=metrics)

    async def _attempts(self, task: Task, repeat_index: int, ids: Any, sampling: SamplingParams,
                        limit: asyncio.Semaphore, stats: TrackerStats, on_episode: Optional[Any] = None
                        ) -> EpisodeResult:
        """The episode, run again (a new id, a fresh environment) while it fails, up to rollout.episode_retries
        times; not when its row lacks what it reads (it would fail the same) or failure_reward trains failures."""
        ro = self.cfg.rollout
        retries = ro.episode_retries if ro.failure_reward is None else 0
        for attempt in range(retries + 1):
            episode_uuid, seed = ids(attempt)
            result = await self._episode(task, repeat_index, episode_uuid, replace(sampling, seed=seed), limit, stats)
            result.attempts = attempt + 1
            if not result.failed or result.row_problem is not None:
                break
            if attempt < retries:
                logger.warning(f"episode {result.episode_uuid} (task {task.task_id}, repeat {repeat_index}) failed; "
                               f"running it again in a fresh environment (retry {attempt + 1} of {retries}, "
                               f"astuner.rollout.episode_retries)")
        if on_episode is not None:
            on_episode(result)
        return result

    def _short_groups(self, episodes: list[EpisodeResult], repeats: int, train: bool) -> tuple[int, int]:
        """(groups short of episodes, groups dropped): a task's group is short when one of its episodes still
        failed after the retries and failures are not trained (failure_reward null); in training with
        rollout.short_group drop every episode of it leaves the step (its samples too)."""
        ro = self.cfg.rollout
        if ro.failure_reward is not None:
            return 0, 0
        short = dropped = 0
        for start in range(0, len(episodes), repeats):
            group = episodes[start:start + repeats]
            if not any(e.failed for e in group):
                continue
            short += 1
            if train and ro.short_group == "drop" and not all(e.failed for e in group):
                dropped += 1
                for e in group:
                    e.group_dropped = True
                    e.samples = []
        return short, dropped

    async def _episode(self, task: Task, repeat_index: int, episode_uuid: str, sampling: SamplingParams,
                       limit: asyncio.Semaphore, stats: TrackerStats) -> EpisodeResult:
        from astuner.config import composed_view
        from astuner.model.auxiliary import all_counted, episode_calls
        from astuner.model.model_tuner import ModelTuner

        ro = self.cfg.rollout
        async with limit:
            result = EpisodeResult(task=task, repeat_index=repeat_index, episode_uuid=episode_uuid)
            started = time.perf_counter()
            result.recorder.label = f"{episode_uuid} (task {task.task_id}, repeat {repeat_index})"
            tuner = (self.tuner or ModelTuner)(
                self.engine, self.tokenizer, sampling, ro.max_model_len, result.recorder,
                trainable_targets=self.trainable_targets, chat_template_kwargs=ro.chat_template_kwargs,
                loop=asyncio.get_running_loop(), reply_format=self.reply_format, gateway_settings=ro.openai_gateway,
                policies=self.policies, engines=self.engines)
            tuner.config = functools.partial(composed_view, self.cfg)  # the seed's model_tuner.config, when read
            env = self._env_handle(task, result.episode_uuid)
            workflow_task = WorkflowTask(task=task, repeat_index=repeat_index, episode_uuid=result.episode_uuid, env=env,
                                         workflow_args=dict(ro.workflow_args), auxiliary_models=self.auxiliary_models)
            # the episode's own endpoint, for agents that keep their own client (with several policies each agent
            # asks for its own: model_tuner.as_openai_base_url(agent=...), unless "default" is mapped)
            if ro.openai_gateway.enable and (not self.policies.several or tuner.trains("default")):
                workflow_task.openai_base_url, workflow_task.openai_api_key = tuner.as_openai_base_url()
            auxiliary_calls = episode_calls()  # this episode's calls of the auxiliary models (workflow and judge)
            try:
                output = await asyncio.wait_for(self._run_workflow(workflow_task, tuner), ro.episode_timeout_s)
                converted = as_workflow_output(output)  # agentscope.tuner's WorkflowOutput is taken too
                if converted is None:
                    raise TypeError(f"the workflow returned {type(output).__name__}, expected a WorkflowOutput")
                output = converted
                result.output = output
                reward, result.is_success, judge_metrics = await judge_episode(
                    self.judge, workflow_task, output, self.auxiliary_models)
                result.reward = overall_reward(reward)
                if isinstance(reward, dict):
                    result.rewards = reward
                    self._check_rewards(reward, result.recorder)
                numbers, result.text_metrics = split_metrics(output.metrics, "workflow/")
                judged, judged_text = split_metrics(judge_metrics)
                result.metrics, result.text_metrics = {**numbers, **judged}, {**result.text_metrics, **judged_text}
                if self.auxiliary_models and all_counted(self.auxiliary_models):
                    result.metrics["auxiliary_calls"] = float(sum(auxiliary_calls.values()))
            except asyncio.TimeoutError:
                result.failed, result.error = True, f"TimeoutError: the episode ran over {ro.episode_timeout_s}s"
            except Exception as exc:
                # the row lacks what the workflow or judge read: its one line, said once per task (run), no traceback
                result.row_problem = row_problem(exc)
                result.failed = True
                result.error = traceback.format_exc() if result.row_problem is None else str(result.row_problem)
            finally:
                # over: a workflow thread that runs on has its calls refused, the episode's gateway keys expire
                result.recorder.close()
                if env is not None:
                    try:
                        await env.release()
                    except Exception as exc:
                        logger.warning(f"releasing env instance {env.instance_id} failed: {exc}")
                descriptors.episode_ended()
            if result.failed:  # a crash or a timeout, not a wrong answer: not trained on unless failure_reward says
                result.reward = ro.failure_reward if ro.failure_reward is not None else 0.0
                result.rewards = {}
                result.is_success = False
                if result.row_problem is None:
                    logger.error(f"episode {result.episode_uuid} (task {task.task_id}, repeat {repeat_index}) failed:\n"
                                 f"{result.error}")
            else:
                result.mad_reasons = madness_reasons(result.recorder.calls, ro.compute_madness_checklist,
                                                     self.special_ids)
                if result.mad_reasons:
                    result.reward, result.is_success, result.rewards = ro.agent_madness_reward, False, {}
            trained = (not result.failed or ro.failure_reward is not None) and self.builds_samples
            result.samples = build_samples(
                result.recorder.calls, task_id=task.task_id, episode_uuid=result.episode_uuid,
                repeat_index=repeat_index, max_samples=ro.multi_turn.max_sample_per_task,
                max_prompt_length=self.cfg.data.max_prompt_length,
                max_response_length=self.cfg.data.max_response_length, stats=stats,
                trainable=self._trained_agents(result.recorder.calls)) if trained else []
            for sample in result.samples:
                sample.reward = result.rewards.get(sample.agent, result.rewards.get(sample.policy, result.reward))
                # cut short: one of its own replies hit the length limit (tracker), or its agent's context ran out
                sample.truncated |= sample.agent in result.recorder.refused_agents
            result.duration_s = time.perf_counter() - started
            return result

    def _trained_agents(self, calls: list[Any]) -> set[str]:
        """The agents of these calls whose policy learns."""
        return {c.target for c in calls if self.policies.learns(self.policies.policy_of(c.target))}

    def _check_rewards(self, rewards: dict[str, float], recorder: EpisodeRecorder) -> None:
        """A reward per agent or policy names agents of the episode or policies of the run, and every trained
        agent of the episode (by its name or its policy's)."""
        calls = recorder.calls
        unknown = sorted(k for k in rewards if k not in recorder.agents and k not in self.policies.trainable)
        if unknown:
            raise ValueError(f"the episode's rewards name {', '.join(map(repr, unknown))}, which is no agent of the "
                             f"episode ({', '.join(sorted(recorder.agents)) or 'none'}) and no policy of the run "
                             f"({', '.join(self.policies.trainable)})")
        missing = sorted({f"{c.target!r} (policy {c.policy!r})" for c in calls if c.target in
                          self._trained_agents(calls) and c.target not in rewards and c.policy not in rewards})
        if missing:
            raise ValueError(f"the episode's rewards name {', '.join(map(repr, rewards))} but not agent "
                             f"{', '.join(missing)}; give a reward for each trained agent or its policy")

    def _env_handle(self, task: Task, episode_uuid: str) -> Any:
        if not task.env_type or "env_url" not in task.metadata:
            return None
        from astuner.env_service import EnvHandle, EnvServiceClient

        client = self.env_client
        if client is None:  # one pooled client per service for the run's episodes
            url, es = task.metadata["env_url"], self.cfg.task_reader.env_service
            client = self._env_clients.get(url)
            if client is None:
                client = self._env_clients[url] = EnvServiceClient(url, es.timeout_s, es.retries, es.retry_backoff_s)
        return EnvHandle(client, task.env_type, task.task_id, episode_uuid)

    async def _run_workflow(self, workflow_task: WorkflowTask, tuner: Any) -> Any:
        if inspect.isclass(self.workflow):
            call = lambda: self.workflow().execute(workflow_task, tuner)  # noqa: E731
        else:
            call = lambda: self.workflow(task_as_dict(workflow_task), tuner, self.auxiliary_models)  # noqa: E731
        if self.cfg.rollout.run_workflow_in_thread:
            return await run_in_own_thread(lambda: asyncio.run(call()))
        return await call()

    def _log_row_problems(self, episodes: list[EpisodeResult]) -> None:
        """The tasks whose rows failed their episodes for the first time in the run: one line per field they lack
        (the task's own line when it is one task), not a traceback per episode."""
        new: dict[str, list[Any]] = {}
        for e in episodes:
            if self.row_problems.record(e.task.task_id, e.row_problem):
                new.setdefault(e.row_problem.lacks, []).append(e.row_problem)
        said = "; episodes fail on it, not trained on (said once per task)"
        for problems in new.values():
            if len(problems) == 1:
                logger.error(one_line(problems[0], said))
                continue
            more = problems[1:]
            ids = ", ".join(repr(p.task_id) for p in more[:5]) + (", ..." if len(more) > 5 else "")
            logger.error(one_line(problems[0], f" (so does each of {len(more)} more: {ids}){said}"))

    def _log_interventions(self, episodes: list[EpisodeResult], stats: TrackerStats, mode: str) -> None:
        """Say when a cap or a madness check changed what is trained: never silently."""
        ro = self.cfg.rollout
        if stats.dropped_samples:
            logger.warning(f"{mode} rollout: {stats.dropped_samples} samples dropped beyond "
                           f"astuner.rollout.multi_turn.max_sample_per_task ({ro.multi_turn.max_sample_per_task} per "
                           f"episode; null keeps every one)")
        if stats.overlong_prompts:
            logger.warning(f"{mode} rollout: {stats.overlong_prompts} samples dropped: prompt longer than "
                           f"astuner.data.max_prompt_length ({self.cfg.data.max_prompt_length})")
        mad = [e for e in episodes if e.mad_reasons]
        if mad:
            logger.warning(f"{mode} rollout: {len(mad)} of {len(episodes)} episodes failed a madness check and got "
                           f"reward {ro.agent_madness_reward} (astuner.rollout.compute_madness_checklist; [] turns it "
                           f"off): {mad[0].mad_reasons[0]}")

    def _metrics(self, episodes: list[EpisodeResult], stats: TrackerStats, elapsed: float) -> dict[str, float]:
        n = max(len(episodes), 1)
        rewards = [e.reward for e in episodes] or [0.0]
        generated = [sum(len(c.response_ids) for c in e.recorder.calls) for e in episodes] or [0]
        multi_call = sum(max(len(e.recorder.calls) - 1, 0) for e in episodes)
        metrics = {
            "rollout/episodes": float(len(episodes)),
            "rollout/error_rate": sum(e.failed for e in episodes) / n,
            "rollout/madness_rate": sum(bool(e.mad_reasons) for e in episodes) / n,
            "rollout/truncated_rate": sum(e.recorder.truncated for e in episodes) / n,
            "rollout/calls_per_episode": stats.calls / n,
            "rollout/samples_per_episode": stats.samples / n,
            "rollout/merge_ratio": stats.merged_calls / multi_call if multi_call else 1.0,
            # what the tracker left out: samples beyond multi_turn.max_sample_per_task, prompts over
            # data.max_prompt_length, responses cut to data.max_response_length (counts over the step)
            "rollout/dropped_samples": float(stats.dropped_samples),
            "rollout/overlong_prompts": float(stats.overlong_prompts),
            "rollout/clipped_samples": float(stats.clipped_samples),
            # tool calls in replies that did not parse (kept as text; the wrong_toolcall madness check acts on them)
            "rollout/tool_parse_failures": float(sum(e.tool_parse_failures for e in episodes)),
            "rollout/response_tokens_mean": statistics.fmean(generated),
            "reward/mean": statistics.fmean(rewards),
            "reward/std": statistics.pstdev(rewards),
            "reward/min": min(rewards),
            "reward/max": max(rewards),
            "reward/success_rate": sum(e.is_success for e in episodes) / n,
            "perf/rollout_time_s": elapsed,
            "perf/rollout_tokens_per_s": sum(generated) / elapsed if elapsed > 0 else 0.0,
        }
        extra: dict[str, list[float]] = {}
        for e in episodes:
            for key, value in e.metrics.items():
                extra.setdefault(key, []).append(value)
        metrics.update({k: statistics.fmean(v) for k, v in extra.items()})
        return metrics
