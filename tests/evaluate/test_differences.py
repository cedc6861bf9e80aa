"""`astuner eval`'s comparison of two models (evaluate/report.py): each task's result of one model paired with the
same task's result of the other, and a difference whose interval lies on one side of 0 reported as one, a drop as
much as a gain. Unit tests over scripted episodes: no model runs."""

from __future__ import annotations

from types import SimpleNamespace

from astuner.evaluate.candidates import Candidate
from astuner.evaluate.report import figures, report, table

TASKS = [f"t{i}" for i in range(12)]  # "t10" sorts before "t2": a sorted side would pair other tasks


def evaluated(label: str, rewards: dict[str, float], order: list[str], k: int = 2) -> SimpleNamespace:
    """A model's evaluation: k episodes of each task with the task's reward, listed in `order` (the order the
    episodes happened to finish in)."""
    episodes = [SimpleNamespace(task=SimpleNamespace(task_id=t), reward=rewards[t], is_success=rewards[t] >= 0.5,
                                recorder=SimpleNamespace(calls=[]), tool_parse_failures=0, failed=False)
                for t in order for _ in range(k)]
    return SimpleNamespace(candidate=Candidate(label=label, folder=None), episodes=episodes, wall_s=1.0, notes=[])


def compare(a: dict[str, float], b: dict[str, float], b_order: list[str]) -> dict:
    models = [figures(evaluated("A", a, TASKS), 2, seed=0), figures(evaluated("B", b, b_order), 2, seed=0)]
    return report(models, 0, {})


def test_the_difference_pairs_each_task_of_one_model_with_the_same_task_of_the_other():
    """B scores 0.25 more than A on every task, its episodes finished in another order: paired task by task, every
    difference is 0.25, so the interval is [0.25, 0.25]; a task of A paired with another task of B (an offset, one
    side sorted or in its own order) would spread the differences and widen it."""
    a = {t: (i % 4) * 0.25 for i, t in enumerate(TASKS)}
    b = {t: a[t] + 0.25 for t in TASKS}
    result = compare(a, b, list(reversed(TASKS)))
    (difference,) = result["differences"]
    assert (difference["a"], difference["b"], difference["tasks"]) == ("A", "B", 12)
    assert difference["reward"]["ci95"] == [0.25, 0.25], difference["reward"]


def test_a_significant_drop_is_reported_as_a_difference_not_as_none_shown():
    """B scores 0.25 or 0.5 less than A on every task: the interval lies entirely below 0, which the table must say
    (excludes 0), never "no difference shown" (a regression passed off as noise)."""
    a = {t: 0.75 + (i % 2) * 0.25 for i, t in enumerate(TASKS)}
    b = {t: a[t] - (0.25 if i % 3 else 0.5) for i, t in enumerate(TASKS)}
    result = compare(a, b, TASKS)
    (difference,) = result["differences"]
    assert difference["reward"]["ci95"][1] < 0, difference["reward"]  # the premise: a significant drop
    line = table(result).splitlines()[-1]
    assert line.startswith("B - A: reward -0.333") and "(excludes 0)" in line and "no difference" not in line, line
