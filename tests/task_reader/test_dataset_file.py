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


def test_gsm8k_train_file(gsm8k_dir):
    tasks = read_jsonl_tasks(str(gsm8k_dir / "train.jsonl"), "train", "question")
    assert len(tasks) == 7473
    assert tasks[0].metadata["answer"].endswith("#### 72")


@pytest.mark.parametrize("lines,fragment", [
    (['{"main_query": "ok"}', '{"main_query": "x",'], "t.jsonl:2: invalid JSON"),
    (['{"main_query": "ok"}', '[1, 2]'], "t.jsonl:2: a task row must be a JSON object"),
    (['{"text": "no query here"}'], "t.jsonl:1: the row has neither 'main_query' nor 'question' (its fields: text)"),
    (['{"main_query": 5}'], "the query must be a string"),
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
