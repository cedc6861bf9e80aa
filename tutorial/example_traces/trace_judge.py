"""A judge of the sensor agent's stored episodes that needs nothing but the conversation: 1 when the final
answer's \\boxed{} is what `read_sensor` returned in that episode, else 0. With it, episodes served without any
user's verdict get their rewards after the fact:

    astuner traces judge launcher_record/traces.db --conf tutorial/example_traces/from_traces.yaml \\
        --judge 'tutorial/example_traces/trace_judge.py->reading_copied'
"""

from __future__ import annotations

from typing import Any

from astuner.task_judge.math_answer import answers_match, extract_answer


async def reading_copied(task: dict[str, Any], response: Any, auxiliary_models: Any = None) -> float:
    readings = [m["content"] for m in task["messages"] if m["role"] == "tool"]
    answer = extract_answer(response or "")
    return float(bool(readings) and answer is not None and answers_match(answer, readings[-1].strip()))
