"""`select_model()`: agentscope.tuner's model selection, with its signature and its result, on astuner's evaluation
code: each candidate chat model plays `workflow_func` on the dataset's rows through the rollout (`RolloutManager`:
`max_threads` episodes at once), `judge_func` scores it, and the candidate with the highest mean reward is returned
with its judge metrics averaged (`<name>_avg`). As agentscope.tuner's, the judge's `response` is
`{"response": ..., "metrics": {..., "execution_time", "input_tokens", "output_tokens", "total_tokens"}}`, and an
episode that raised is skipped. Beyond it, the log gives each candidate's mean with its 95% interval over the rows
and each pair's difference with its interval (`astuner.evaluate`), so a win within the noise is said to be one.

Code written for agentscope.tuner runs with the import swapped:
`from astuner.tuner.model_selection import select_model` (or `from astuner.tuner import select_model`)."""

from __future__ import annotations

import inspect
import statistics
import time
from typing import Any, Callable, Sequence

from loguru import logger

from astuner.errors import UserError
from astuner.schema import JudgeOutput
from astuner.evaluate.report import difference, per_task
from astuner.evaluate.stats import interval


def _check(fn: Any, role: str, names: Sequence[Sequence[str]]) -> None:
    if not callable(fn) or not inspect.iscoroutinefunction(fn):
        raise UserError(f"{role} must be an async function; got {fn!r}")
    params = set(inspect.signature(fn).parameters)
    if not any(set(option) <= params for option in names):
        raise UserError(f"{role} {getattr(fn, '__name__', fn)} must take "
                        f"({' or '.join(', '.join(option) for option in names)}); it takes ({', '.join(params)})")


class _Counted:
    """A candidate as the workflow sees it: the candidate itself for every attribute, its calls' token usage
    (AgentScope's ChatResponse.usage) tallied per episode."""

    def __init__(self, model: Any):
        self._model = model
        self.input_tokens = self.output_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        response = await self._model(*args, **kwargs)
        if inspect.isasyncgen(response):
            return self._stream(response)
        self._tally(response)
        return response

    async def _stream(self, chunks: Any) -> Any:
        last = None
        async for last in chunks:
            yield last
        self._tally(last)  # a stream's last chunk carries the usage so far

    def _tally(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.input_tokens += int(getattr(usage, "input_tokens", 0) or 0)
            self.output_tokens += int(getattr(usage, "output_tokens", 0) or 0)


def _config(max_threads: int) -> Any:
    """The rollout's settings: `max_threads` episodes at once, one per row, no retries, no madness checks (the
    judge's reward is the reward), no gateway (the candidates are the agents' own models)."""
    from astuner.config.schema import AstunerConfig

    cfg = AstunerConfig()
    ro = cfg.rollout
    ro.max_env_worker, ro.num_repeat, ro.episode_retries, ro.compute_madness_checklist = max_threads, 1, 0, []
    ro.episode_timeout_s = 7 * 24 * 3600.0  # agentscope.tuner's waits for every row as long as it takes
    ro.openai_gateway.enable = False
    return cfg


def _tasks(train_dataset: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    from astuner.schema import Task
    from astuner.task_reader.huggingface import load_rows

    rows = load_rows(train_dataset.path, getattr(train_dataset, "name", None), train_dataset.split or "train",
                     key="select_model(train_dataset=)")
    limit = getattr(train_dataset, "total_steps", None)
    count = len(rows) if limit is None else min(limit, len(rows))
    raw = [dict(rows[i]) for i in range(count)]
    return [Task(task_id=str(i), metadata=row) for i, row in enumerate(raw)], raw


async def select_model(*, workflow_func: Callable, judge_func: Callable, train_dataset: Any,
                       candidate_models: Sequence[Any], max_threads: int = 2) -> tuple[Any, dict[str, float]]:
    """(the candidate with the highest mean reward over the dataset, its judge metrics averaged as `<name>_avg`)."""
    import asyncio

    from astuner.rollout.manager import RolloutManager
    from astuner.rollout.row_problems import RowProblems
    from astuner.schema import WorkflowOutput
    from astuner.schema.output import as_judge_output

    _check(workflow_func, "workflow_func", [("task", "model")])
    _check(judge_func, "judge_func", [("task", "response"), ("_task", "response")])
    if len(candidate_models) < 2:
        raise ValueError("At least two candidate models must be provided.")
    cfg = _config(max_threads)
    tasks, raw = _tasks(train_dataset)
    task_word = "task" if "task" in inspect.signature(judge_func).parameters else "_task"
    results = []
    for model in candidate_models:
        async def workflow(task: Any, counted: _Counted, auxiliary_models: Any = None) -> WorkflowOutput:
            started = time.perf_counter()
            row = raw[int(task["task_id"])]
            output = await workflow_func(task=row, model=counted)
            metrics = dict(getattr(output, "metrics", None) or {})
            metrics.update({"execution_time": time.perf_counter() - started,
                            "input_tokens": float(counted.input_tokens), "output_tokens": float(counted.output_tokens),
                            "total_tokens": float(counted.input_tokens + counted.output_tokens)})
            verdict = await judge_func(**{task_word: row}, response={"response": getattr(output, "response", None),
                                                                     "metrics": metrics})
            verdict = as_judge_output(verdict) or verdict
            reward = float(verdict.reward)
            return WorkflowOutput(reward=reward, is_success=reward > 0, metrics=dict(verdict.metrics or {}))

        manager = RolloutManager(cfg, workflow, None, None, None, row_problems=RowProblems(),
                                 tuner=lambda *args, model=model, **kwargs: _Counted(model), builds_samples=False)
        name = getattr(model, "model_name", type(model).__name__)
        logger.info(f"select_model: evaluating {name} on {len(tasks)} rows")
        started = time.perf_counter()
        batch = await manager.run(tasks, "val", num_repeat=1, tag=f"select_model:{name}", check_error_rate=False)
        kept = [e for e in batch.episodes if not e.failed]
        for e in batch.episodes:
            if e.failed:
                logger.warning(f"select_model: skipping row {e.task.task_id} for model {name}: "
                               f"{(e.error or '').strip().splitlines()[-1] if e.error else 'failed'}")
        sums: dict[str, float] = {}  # the judge's metrics (the episode's, as the workflow returned them)
        for metrics in (e.metrics for e in kept):
            for key, value in metrics.items():
                key = key.removeprefix("workflow/")  # (the rollout's name for a workflow's metric)
                sums[key] = sums.get(key, 0.0) + value
        averaged = {f"{key}_avg": value / len(kept) for key, value in sums.items()} if kept else {}
        mean = statistics.fmean(e.reward for e in kept) if kept else 0.0
        rewards = {t: statistics.fmean(e.reward for e in g) for t, g in per_task(kept).items()}
        low, high = interval(list(rewards.values()), 0) if rewards else (mean, mean)
        logger.info(f"select_model: {name}: mean reward {mean:.4f} [{low:.4f}, {high:.4f}] (95%) over {len(kept)} "
                    f"rows in {time.perf_counter() - started:.0f} s")
        results.append((model, name, mean, averaged, {"label": name, "per_task": {
            t: {"reward": r, "success": float(r > 0)} for t, r in rewards.items()}}))
        await asyncio.sleep(0)
    best = max(range(len(results)), key=lambda i: results[i][2])  # the first of equals, as agentscope.tuner's
    for i, (_, name, _, _, figures) in enumerate(results):
        if i != best:
            d = difference(figures, results[best][4], 0)["reward"]
            logger.info(f"select_model: {results[best][1]} - {name}: {d['mean']:+.4f} [{d['ci95'][0]:+.4f}, "
                        f"{d['ci95'][1]:+.4f}]" + ("" if d["excludes_0"] else " (within the noise: the interval "
                                                                              "includes 0)"))
    logger.info(f"select_model: selected {results[best][1]}")
    return results[best][0], results[best][3]


async def avg_time_judge(_task: dict[str, Any], response: Any) -> Any:
    """agentscope.tuner's built-in judge of speed: reward −execution_time (the faster the better), metric
    `avg_time_seconds`."""
    seconds = float(_metrics(response, "execution_time")["execution_time"])
    return JudgeOutput(reward=-seconds, metrics={"avg_time_seconds": seconds})


async def avg_token_consumption_judge(_task: dict[str, Any], response: Any) -> Any:
    """agentscope.tuner's built-in judge of thrift: reward −total tokens (else −output tokens), metric
    `token_consumed`."""
    metrics = _metrics(response, "usage" if isinstance(response, dict) and "usage" in (response.get("metrics") or {})
                       else "total_tokens")
    usage = metrics.get("usage", metrics)
    tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    tokens = usage.get("output_tokens") if tokens is None and isinstance(usage, dict) else tokens
    if tokens is None:
        raise ValueError("Neither 'total_tokens' nor 'output_tokens' found in the response's metrics")
    return JudgeOutput(reward=-float(tokens), metrics={"token_consumed": float(tokens)})


def _metrics(response: Any, needed: str) -> dict[str, Any]:
    if not isinstance(response, dict) or not isinstance(response.get("metrics"), dict):
        raise ValueError("Response must be a dict with 'response' and 'metrics' keys")
    if needed not in response["metrics"]:
        raise ValueError(f"Missing '{needed}' field in the response's metrics")
    return response["metrics"]


__all__ = ["select_model", "avg_time_judge", "avg_token_consumption_judge"]
