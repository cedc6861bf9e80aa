"""The seed system's workflow API that astuner has no equivalent for, found in a workflow's source before the run.

A seed-era workflow that calls `model_tuner.get_context_tracker()` or `get_llm_proxy()`, or reads
`workflow_task.gym_env` (the seed's synchronous environment: `obs, reward, done, info = env.step(action=...)`),
fails on it in every episode. The plug-in's source is read (`ast`, as `lazy_imports` reads it) and each such use
refused in one line naming the file, the line and what astuner offers instead. What the seed's workflows read
that astuner has (`model_tuner.config`, `get_model`, `is_trainable`, pydantic `Field` defaults on a Workflow) is
not refused: it works.
"""

from __future__ import annotations

import ast
from typing import Any

from astuner.config.lazy_imports import parsed_sources

# the seed system's ModelTuner methods astuner has no object for: what to use instead (ModelTuner raises these,
# and --dry-run says them when a workflow calls them)
SEED_GONE = {
    "get_llm_proxy": "model_tuner.get_llm_proxy(): astuner has no LLM proxy object; an agent that keeps its own "
                     "client takes model_tuner.as_openai_base_url() (or as_openai_client()): the episode's "
                     "OpenAI-compatible endpoint, its calls recorded as the episode's",
    "get_context_tracker": "model_tuner.get_context_tracker(): astuner records an episode's calls itself (no "
                           "tracker to ask); a context about to overflow ends the call with finish_reason 'length' "
                           "(or, past max_model_len, a refused call and the episode marked truncated): stop on the "
                           "agent's reply instead of context_overflow",
}

GONE = {**SEED_GONE,
        "gym_env": "workflow_task.gym_env: the seed system's environment (a synchronous env.step(action=...) "
                   "returning (observation, reward, done, info)) is workflow_task.env in astuner: an environment "
                   "service handle, `result = await workflow_task.env.step(action)` returning the service's dict "
                   "(docs/data.md)"}


def seed_api_problems(obj: Any, key: str) -> list[str]:
    """One line per use, in `obj`'s body, of a seed-system name astuner has no equivalent for."""
    problems = []
    for path, start, tree in parsed_sources(obj):
        seen = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in GONE and node.attr not in seen:
                seen.add(node.attr)
                problems.append(f"{key}: {getattr(obj, '__name__', obj)!s} uses {node.attr} (at {path}:"
                                f"{start + node.lineno - 1}), which every episode would fail on: "
                                f"{GONE[node.attr]}")
    return problems
