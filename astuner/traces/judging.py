"""Rewards for a trace store's episodes after the fact, from a config's judge (`astuner traces judge`).

A stored episode has no dataset row and no workflow output, so the judge gets them built from its calls:
- the task (`workflow_task.task`; a judge function's `task`): `task_id` the episode's id, `main_query` its first
  user message, and the fields `episode`, `source` (`served`, `imported:...`) and `messages`: the conversation,
  the last call's messages and its reply as an assistant message (split as the gateway splits a reply: its text,
  `tool_calls`, and its thinking apart as `reasoning_content`; the config's `rollout.tool_call_parser` and
  `reasoning_parser`);
- the output: `response` the last reply's text (no thinking, no tool calls), `metadata` `{"final_answer": that
  text, "messages": the conversation}` (what the built-in answer judges read).
A judge that needs more than the conversation holds (a dataset's ground truth) fails on every episode and is said
in one line. The reward becomes the episode's (a feedback row `{"from": "judge", ...}`); by default only episodes
without one are judged: a user's verdict is not overwritten unless `--all` asks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Optional

from astuner.errors import DataError
from astuner.model.chat.replies import reply_message
from astuner.records.trace_store import TraceStore
from astuner.rollout.manager import split_metrics
from astuner.schema import WorkflowOutput, WorkflowTask
from astuner.schema.calls import CallRecord
from astuner.schema.task import Task
from astuner.task_judge.base import BaseJudge
from astuner.task_judge.run_judge import judge_episode, overall_reward


@dataclass
class JudgeReport:
    episodes: int = 0  # in the store
    judged: int = 0
    kept: int = 0  # had a reward already and were left as they were
    failed: list[str] = field(default_factory=list)  # 'episode: why'
    rewards: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else None
        return {"episodes": self.episodes, "judged": self.judged, "kept": self.kept, "failed": self.failed,
                "mean_reward": mean}


def episode_as_task(episode: dict[str, Any], calls: list[CallRecord],
                    reply_format: tuple[str, str] = ("auto", "auto")) -> tuple[WorkflowTask, WorkflowOutput]:
    reply = reply_message(calls[-1], reply_format)
    messages = [*calls[-1].messages, reply]
    query = next((m["content"] for m in messages if m.get("role") == "user"), None)
    task = Task(task_id=episode["id"], main_query=query,
                metadata={"episode": episode["id"], "source": episode["source"], "messages": messages})
    return WorkflowTask(task), WorkflowOutput(response=reply["content"],
                                              metadata={"final_answer": reply["content"], "messages": messages})


async def judge_episodes(judge: Any, store: TraceStore, writer: TraceStore, rejudge: bool, concurrency: int,
                         auxiliary: Optional[dict[str, Any]] = None,
                         reply_format: tuple[str, str] = ("auto", "auto")) -> JudgeReport:
    """Judge `store`'s episodes (those without a reward, or all) `concurrency` at a time; each reward is written
    through `writer` (the same file, opened for writing) as it comes."""
    episodes = store.episodes()
    report = JudgeReport(episodes=len(episodes))
    chosen = [e for e in episodes if rejudge or e["reward"] is None]
    report.kept = len(episodes) - len(chosen)
    name = type(judge).__name__ if isinstance(judge, BaseJudge) else getattr(judge, "__name__", "judge")
    limit = asyncio.Semaphore(concurrency)

    async def one(episode: dict[str, Any]) -> None:
        async with limit:
            try:
                workflow_task, output = episode_as_task(episode, store.calls(episode["id"]), reply_format)
                workflow_task.auxiliary_models = dict(auxiliary or {})
                reward, success, metrics = await judge_episode(judge, workflow_task, output, auxiliary)
            except Exception as exc:  # noqa: BLE001 - an episode the judge cannot score is named, not fatal
                report.failed.append(f"{episode['id']}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                                     if str(exc) else f"{episode['id']}: {type(exc).__name__}")
                return
        overall = overall_reward(reward)
        numbers, texts = split_metrics(metrics)  # as a training run's judge metrics: numbers, else kept as text
        metadata: dict[str, Any] = {"from": "judge", "judge": name, "is_success": bool(success), "metrics": numbers}
        if texts:
            metadata["text_metrics"] = texts
        if isinstance(reward, dict):
            metadata["rewards"] = reward
        await asyncio.wrap_future(writer.add_feedback(episode["id"], overall, metadata))  # committed
        report.judged += 1
        report.rewards.append(overall)

    await asyncio.gather(*(one(e) for e in chosen))
    writer.flush()
    report.failed.sort()
    if chosen and not report.judged:
        raise DataError(f"the judge scored none of the {len(chosen)} episodes; the first: {report.failed[0]} "
                        f"(a judge of stored episodes sees the conversation: task['messages'], "
                        f"workflow_output.metadata['final_answer'], not a dataset row)")
    return report

