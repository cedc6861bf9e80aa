"""A trajectory row of the debug backbone's records (trajectories/step_N.jsonl): what an episode was asked, did,
was judged and trained on, as the viewer reads it."""

from __future__ import annotations

import statistics
from typing import Any

from astuner.schema.calls import conversations
from astuner.task_judge.math_answer import expected_answer


def episode_row(e: Any) -> dict[str, Any]:
    """One episode's row: the task, the reward, the last call's conversation (every agent's, when it is not the
    whole episode), the samples trained."""
    last = e.recorder.calls[-1] if e.recorder.calls else None
    row = {
        "task_id": e.task.task_id, "repeat_index": e.repeat_index, "episode_uuid": e.episode_uuid,
        # the task as the reader gave it: its query, and the answer it expects (to check a failed episode)
        "query": e.task.query_or_none, "expected": expected_answer(e.task.metadata),
        "reward": e.reward, "is_success": e.is_success,
        "advantage": statistics.fmean([s.advantage for s in e.samples]) if e.samples else None,
        "failed": e.failed, "error": e.error, "madness": e.mad_reasons, "truncated": e.recorder.truncated,
        # runs of it (1 + retries, rollout.episode_retries); its group left the step short (rollout.short_group)
        "attempts": e.attempts, "group_dropped": e.group_dropped,
        # the weights that generated it (off-policy: older than the step's learner)
        "policy_version": e.samples[0].policy_version if e.samples else None,
        "messages": last.messages if last else [], "response": last.response_text if last else None,
        "calls": len(e.recorder.calls), "tool_parse_failures": e.tool_parse_failures,
        "prompt_tokens": last.prompt_tokens if last else 0,  # (an endpoint's: the counts it reported)
        "response_tokens": sum(c.completion_tokens for c in e.recorder.calls),
        # what was trained: per sample, its prompt, its response (generated tokens and, between calls,
        # tool results and new turns) and the tokens with loss mask 1 (the generated ones)
        "samples": [{"prompt_tokens": s.prompt_length, "response_tokens": len(s.loss_mask),
                     "trained_tokens": sum(s.loss_mask), "num_calls": s.num_calls, "agent": s.agent}
                    for s in e.samples],
        "agents": sorted({c.target for c in e.recorder.calls}),
        "policies": {c.target: c.policy for c in e.recorder.calls},  # agent -> the policy that served it
        "rewards": e.rewards,  # {agent or policy: reward} when the workflow or judge gave one each
        "metrics": {**e.metrics, **e.text_metrics},  # the workflow's and judge's, text ones as text
        "metadata": e.output.metadata if e.output else None,
    }
    whole = conversations(e.recorder.calls)
    if len(whole) > 1:  # several agents (or contexts): each one's, labelled; else messages + response are it
        row["conversations"] = [{"agent": c.target, "policy": c.policy, "messages": c.messages,
                               "response": c.response_text} for c in whole]
    return row
