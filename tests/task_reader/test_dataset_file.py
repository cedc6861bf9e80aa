"""`dataset_file` reader."""

from __future__ import annotations

import json

import pytest

from astuner.errors import DataError
from astuner.task_reader.dataset_file import DatasetFileReader, read_jsonl_tasks


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_main_query_rows_and_raw_rows(tmp_path):
    f = write_lines(tmp_path / "t.jsonl", [
        json.dumps({"task_id": "a", "main_query": "q1", "init_messages": [{"role": "system", "content": "s"}],
                    "env_type": "math", "metadata": {"k": 1}, "answer": "#### 3"}),
        "",
        json.dumps({"question": "q2", "answer": "#### 4"}),
    ])
    a, b = read_jsonl_tasks(str(f), "train", "question")
    assert (a.task_id, a.main_query, a.env_type) == ("a", "q1", "math")
    assert a.init_messages == [{"role": "system", "content": "s"}]
    assert a.metadata == {"k": 1, "answer": "#### 3"}
    assert (b.task_id, b.main_query) == ("train_1", "q2")
    assert b.metadata == {"question": "q2", "answer": "#### 4"}


def test_query_field_is_configurable(tmp_path):
    f = write_lines(tmp_path / "t.jsonl", [json.dumps({"prompt": "hi"})])
    assert read_jsonl_tasks(str(f), "train", "prompt")[0].main_query == "hi"


@pytest.mark.parametrize("row,why", [
    ({"seed": 0, "size": 4, "p": 0.8, "index": 3, "uid": "u"}, "its row has no 'question' (fields: index, p, seed, "
                                                                 "size, uid; astuner.task_reader.query_field)"),
    ({"question": 0, "seed": 0}, "its 'question' is int 0, not a string"),
])
def test_a_row_without_a_string_query_is_a_task_and_says_so_where_asked(tmp_path, row, why):
    """A game's or an environment's row (agentscope.tuner hands the raw row to the workflow) is a valid task:
    the row is its metadata, and reading its query raises NoQuery naming the field it lacks."""
    from astuner.backbone.runtime import task_from_row, task_row
    from astuner.schema import WorkflowTask
    from astuner.schema.task import NoQuery
    from astuner.task_judge.run_judge import task_as_dict

    (task,) = read_jsonl_tasks(str(write_lines(tmp_path / "t.jsonl", [json.dumps(row)])), "train", "question")
    assert task.metadata == row and not task.has_query and task.query_or_none is None
    with pytest.raises(NoQuery) as info:
        task.main_query
    assert str(info.value) == (f"task 'train_0' has no query: {why}; read the row from workflow_task.task.metadata "
                               f"(a function workflow gets it as `task`)")
    assert isinstance(info.value, DataError)
    given = task_as_dict(WorkflowTask(task=task, workflow_args={"trainable_target": "werewolf"}))
    assert given == {**row, "task_id": "train_0", "workflow_args": {"trainable_target": "werewolf"}}
    assert repr(task).startswith("Task(task_id='train_0', main_query=None")  # a repr never raises
    again = task_from_row(task_row(task))  # how verl and Trinity carry a task to their workers
    assert again == task and not again.has_query and again.no_query == task.no_query


def test_gsm8k_train_file(gsm8k_dir):
    tasks = read_jsonl_tasks(str(gsm8k_dir / "train.jsonl"), "train", "question")
    assert len(tasks) == 7473
    assert tasks[0].metadata["answer"].endswith("#### 72")


@pytest.mark.parametrize("lines,fragment", [
    (['{"main_query": "ok"}', '{"main_query": "x",'], "t.jsonl:2: invalid JSON"),
    (['{"main_query": "ok"}', '[1, 2]'], "t.jsonl:2: a task row must be a JSON object"),
    (['{"main_query": 5}'], "'main_query' must be a string"),
    (['{"main_query": "q", "init_messages": "hello"}'], "'init_messages' must be a list"),
    (['{"task_id": 1, "main_query": "a"}', '{"task_id": 1, "main_query": "b"}'], "task id '1' appears twice"),
    (["", "  "], "holds no tasks"),
])
def test_bad_rows(tmp_path, lines, fragment):
    f = write_lines(tmp_path / "t.jsonl", lines)
    with pytest.raises(DataError, match=None) as info:
        read_jsonl_tasks(str(f), "train", "question")
    assert fragment in str(info.value)


def test_missing_file_names_paths_tried(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        DatasetFileReader("nope.jsonl", None, "question").train_tasks()


def test_validation_optional_and_relative_to_extra_root(tmp_path, monkeypatch):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    write_lines(conf_dir / "train.jsonl", ['{"main_query": "a"}'])
    write_lines(conf_dir / "val.jsonl", ['{"main_query": "b"}', '{"main_query": "c"}'])
    monkeypatch.chdir(tmp_path)
    assert DatasetFileReader("train.jsonl", None, "question", [conf_dir]).val_tasks() == []
    reader = DatasetFileReader("train.jsonl", "val.jsonl", "question", [conf_dir])
    assert [t.main_query for t in reader.val_tasks()] == ["b", "c"]
    assert [t.task_id for t in reader.val_tasks()] == ["val_0", "val_1"]


def test_max_val_tasks_validates_on_the_first_tasks_only(tmp_path):
    from astuner.config import load_run_config
    from astuner.preflight import check_tasks
    from astuner.task_reader import build_task_reader

    write_lines(tmp_path / "train.jsonl", [json.dumps({"question": f"q{i}"}) for i in range(3)])
    write_lines(tmp_path / "val.jsonl", [json.dumps({"question": f"v{i}"}) for i in range(5)])
    conf = tmp_path / "run.yaml"
    conf.write_text("astuner:\n  model: {path: m}\n  rollout: {agentscope_workflow: 'a.b->C'}\n"
                    "  task_reader:\n    type: dataset_file\n    dataset_file:\n"
                    "      training: {file_path: train.jsonl}\n      validation: {file_path: val.jsonl}\n")
    run = load_run_config(conf, ["astuner.task_reader.max_val_tasks=2"])
    reader = build_task_reader(run.astuner, run.extra_roots)
    assert [t.main_query for t in reader.val_tasks()] == ["v0", "v1"] and len(reader.train_tasks()) == 3
    assert check_tasks(run.astuner, run.extra_roots, offline=True) == "tasks: 3 training, 2 validation"
    assert len(build_task_reader(load_run_config(conf).astuner, run.extra_roots).val_tasks()) == 5
