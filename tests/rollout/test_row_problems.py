"""Rows the workflow cannot use: a task row without a field the workflow reads fails its episodes in one line
naming the field, said once per task (not a traceback per episode); the run says at its end which tasks were
skipped, and a run that trained no step because of them exits non-zero."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest
from loguru import logger

from astuner import Task, Workflow, WorkflowOutput
from astuner.rollout.manager import RolloutFailed, RolloutManager
from astuner.rollout.row_problems import RowProblems
from astuner.schema.task import MissingField, NoQuery, RowLacks
from tests.conftest import run_cli
from tests.helpers import ScriptedEngine, captured_logs, rollout_config


def config(**rollout):
    return rollout_config(**{"episode_timeout_s": 30.0, "max_response_length_in_one_turn": 16, **rollout})


class ReadsReading(Workflow):  # the README's workflow reads a field of the row, then the query
    async def execute(self, workflow_task, model_tuner):
        reading = workflow_task.task.metadata["reading"]
        await model_tuner([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(reward=float(reading > 0))


class WrapsIt(Workflow):  # a workflow that turns the KeyError into its own error
    async def execute(self, workflow_task, model_tuner):
        try:
            workflow_task.task.metadata["reading"]
        except KeyError as exc:
            raise RuntimeError("my agent could not start") from exc
        return WorkflowOutput(reward=1.0)


async def function_workflow(task, model, auxiliary_models):  # tune()'s function form: the row as `task`
    return WorkflowOutput(reward=float(task["reading"] > 0))


def tasks():
    return [Task(task_id="good-0", main_query="q0", metadata={"question": "q0", "reading": 3}),
            Task(task_id="bad-1", main_query="q1", metadata={"question": "q1", "answer": "7"}),
            Task(task_id="good-2", main_query="q2", metadata={"question": "q2", "reading": 5}),
            Task(task_id="bad-3", main_query="q3", metadata={"question": "q3", "answer": "9"}),
            Task(task_id="noq-4", metadata={"reading": 1}, no_query="its row has no 'question' (fields: reading)")]


@pytest.fixture
def errors():
    lines, sink = captured_logs("ERROR")
    yield lines
    logger.remove(sink)


def test_a_row_without_the_field_fails_in_one_line_said_once_per_task(tokenizer, errors):
    problems = RowProblems()
    manager = RolloutManager(config(max_error_rate=1.0), ReadsReading, None, ScriptedEngine(tokenizer, lambda p: "ok"),
                             tokenizer, row_problems=problems)
    for _ in range(2):  # two steps: the tasks are said the first time only
        batch = asyncio.run(manager.run(tasks()))
    failed = [e for e in batch.episodes if e.failed]
    assert {e.task.task_id for e in failed} == {"bad-1", "bad-3", "noq-4"}
    bad = next(e for e in failed if e.task.task_id == "bad-1")
    assert bad.error == "task 'bad-1' has no field 'reading': its row has answer, question"  # one line, no traceback
    noq = next(e for e in failed if e.task.task_id == "noq-4")
    assert noq.error.startswith("task 'noq-4' has no query: its row has no 'question'")
    assert all(e.samples for e in batch.episodes if not e.failed)
    # the log: no traceback; one line per field, naming every task that lacks it, each task once in the run
    assert not any("Traceback" in line for line in errors), errors
    assert len(errors) == 2 and all(len(line) <= 300 and "\n" not in line.strip() for line in errors), errors
    reading = next(line for line in errors if "'reading'" in line)
    assert "'bad-1'" in reading and "'bad-3'" in reading and "said once per task" in reading
    assert problems.skipped() == {"bad-1": "reading", "bad-3": "reading", "noq-4": "question"}
    summary = problems.summary()
    assert summary.startswith("3 tasks skipped: every episode failed on its row, 2 lacking field 'reading' "
                              "('bad-1', 'bad-3'); 1 lacking field 'question' ('noq-4')"), summary


def test_a_task_some_of_whose_episodes_get_past_its_row_is_not_skipped():
    problems = RowProblems()
    problem = MissingField("task 't' has no field 'x': its row has y", "t", "x")
    assert problems.record("t", problem) and not problems.record("t", problem)
    assert problems.skipped() == {"t": "x"}
    problems.record("t", None)  # an episode that did not need the field
    assert problems.skipped() == {} and problems.summary() is None


def test_a_wrapped_missing_field_and_a_function_workflow_are_recognised(tokenizer, errors):
    for workflow in (WrapsIt, function_workflow):
        manager = RolloutManager(config(), workflow, None, ScriptedEngine(tokenizer, lambda p: "ok"), tokenizer,
                                 row_problems=RowProblems())
        batch = asyncio.run(manager.run(tasks()[:2]))
        bad = [e for e in batch.episodes if e.failed]
        assert {e.task.task_id for e in bad} == {"bad-1"}
        assert bad[0].error.startswith("task 'bad-1' has no field 'reading'"), bad[0].error
    assert not any("Traceback" in line for line in errors), errors


def test_every_episode_failing_on_its_row_stops_the_step_with_that_line(tokenizer):
    manager = RolloutManager(config(), ReadsReading, None, ScriptedEngine(tokenizer, lambda p: "ok"), tokenizer,
                             row_problems=RowProblems())
    with pytest.raises(RolloutFailed) as info:
        asyncio.run(manager.run([tasks()[1]]))
    assert str(info.value).endswith("first error: task 'bad-1' has no field 'reading': its row has answer, question")


class CountsRuns(Workflow):
    """ReadsReading, counting its runs per task; task 'flaky-5' fails by a crash (not its row) every time."""

    runs: dict = {}

    async def execute(self, workflow_task, model_tuner):
        task = workflow_task.task
        CountsRuns.runs[task.task_id] = CountsRuns.runs.get(task.task_id, 0) + 1
        if task.task_id == "flaky-5":
            raise ConnectionError("environment went away")
        await model_tuner([{"role": "user", "content": task.main_query}])
        return WorkflowOutput(reward=float(task.metadata["reading"] > 0))


def test_an_episode_failing_on_its_row_is_not_retried(tokenizer, monkeypatch):
    """rollout.episode_retries runs a failed episode again in a fresh environment; an episode that failed on its
    row would fail the same way again (the row does not change): it runs once, while a crash is retried."""
    monkeypatch.setattr(CountsRuns, "runs", {})
    rows = tasks()[:2] + [Task(task_id="flaky-5", main_query="q5", metadata={"question": "q5", "reading": 2})]
    manager = RolloutManager(config(episode_retries=2, num_repeat=2, max_error_rate=1.0), CountsRuns, None,
                             ScriptedEngine(tokenizer, lambda p: "ok"), tokenizer, row_problems=RowProblems())
    asyncio.run(manager.run(rows))
    assert CountsRuns.runs == {"good-0": 2, "bad-1": 2, "flaky-5": 6}  # 2 episodes each; flaky-5's run 3 times


def test_the_row_error_is_a_key_error_and_survives_pickling():
    row = Task(task_id="t", metadata={"a": 1}).metadata
    assert row.get("x") is None and "x" not in row and json.loads(json.dumps(row)) == {"a": 1}
    with pytest.raises(KeyError) as info:
        row["x"]
    again = pickle.loads(pickle.dumps(info.value))  # from a workflow's thread, a Ray worker
    assert isinstance(again, MissingField) and (again.task_id, again.lacks) == ("t", "x")
    assert str(again) == "task 't' has no field 'x': its row has a"
    with pytest.raises(NoQuery) as no_query:
        Task(task_id="t").main_query  # no query given at all
    assert isinstance(no_query.value, RowLacks)


README_WORKFLOW = """
from astuner import Workflow, WorkflowOutput


class SensorWorkflow(Workflow):
    async def execute(self, workflow_task, model_tuner):
        reading = workflow_task.task.metadata["reading"]
        await model_tuner([{"role": "user", "content": f"{workflow_task.task.main_query} {reading}"}])
        return WorkflowOutput(reward=float(workflow_task.repeat_index))  # rewards that differ: a group trains
"""


@pytest.mark.parametrize("rows_lacking", ["some", "all"])
def test_a_run_says_which_tasks_it_skipped_and_fails_when_no_step_trained(rows_lacking, tmp_path, tiny_model_dir,
                                                                           monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_agent.py").write_text(README_WORKFLOW)
    rows = [{"task_id": f"train-{i}", "question": f"What does sensor S{i} read?", "answer": str(i), "reading": i}
            for i in range(4)]
    for row in rows if rows_lacking == "all" else rows[:1]:
        del row["reading"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "my_agent.yaml").write_text(f"""
astuner:
  task_reader: {{type: dataset_file, dataset_file: {{training: {{file_path: train.jsonl}}}}}}
  model: {{path: {tiny_model_dir}}}
  data: {{train_batch_size: 4}}
  rollout: {{agentscope_workflow: my_agent.py->SensorWorkflow, engine: hf, num_repeat: 2, max_error_rate: 1,
            max_response_length_in_one_turn: 4}}
  trainer_common: {{total_training_steps: 2, test_freq: -1, device: cpu}}
""")
    code, _, err = run_cli(["--conf", "my_agent.yaml", "--exp-dir", str(tmp_path / "runs")], capsys)
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if "has no field 'reading'" in line]
    if rows_lacking == "some":
        assert code == 0, err[-3000:]
        assert len(lines) == 1 and "task 'train-0' has no field 'reading'" in lines[0], err[-3000:]
        assert "1 task skipped: every episode failed on its row, 1 lacking field 'reading' ('train-0')" in err
    else:
        assert code == 2, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith("astuner: error: no step trained: 4 tasks skipped: every episode failed on its row, "
                               "4 lacking field 'reading'") and len(last) <= 300, last


def test_the_dry_run_names_rows_that_lack_what_most_rows_have():
    from astuner.rollout.row_problems import uneven_note

    rows = [{"question": f"q{i}", "answer": str(i), "reading": i} for i in range(6)]
    del rows[2]["reading"], rows[4]["question"]
    train = [Task(task_id=f"train-{i}", main_query=row.get("question"), metadata=row) for i, row in enumerate(rows)]
    val = [Task(task_id="val-0", main_query="q", metadata={"question": "q", "answer": "1", "reading": 1})]
    note = uneven_note(train, val, "question")
    assert note == ("some rows lack what most have: the query 'question' (lacking from 1 of 7 tasks: train-4); "
                    "'reading' (lacking from 1 of 6 training rows: train-2); a workflow or judge that reads one "
                    "fails on those rows")
    assert uneven_note(train[:2], val, "question") == ""  # rows that agree
    raw = [Task(task_id=f"t{i}", metadata={"seed": i}) for i in range(3)]  # no row has a query: raw rows, not a gap
    assert uneven_note(raw, [], "question") == ""
    many = [Task(task_id=f"a-very-long-task-identifier-{i}", metadata={f"field_{k}": 1 for k in range(9) if k != i % 9})
            for i in range(40)]
    assert len(uneven_note(many, [], "question")) <= 240
