"""`huggingface_dat_repo` reader on local copies, and its offline error for hub ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from astuner.errors import DataError
from astuner.task_reader.huggingface import HuggingfaceDatRepoReader


def reader(path, train="train", val="test", name=None, roots=()):
    return HuggingfaceDatRepoReader(str(path), name, train, val, "question", roots)


def test_local_folder_of_jsonl(gsm8k_dir):
    r = reader(gsm8k_dir)
    train, val = r.train_tasks(), r.val_tasks()
    assert (len(train), len(val)) == (7473, 1319)
    assert train[0].main_query.startswith("Natalia sold clips")
    assert train[0].metadata["answer"].endswith("#### 72")
    assert (train[0].task_id, val[0].task_id) == ("train_0", "test_0")


def test_missing_split_lists_available(gsm8k_dir):
    with pytest.raises(DataError, match="no split 'validation'"):
        reader(gsm8k_dir, val="validation").val_tasks()


def test_single_file_is_the_training_split(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": str(i)}) for i in range(3)) + "\n")
    r = reader(f)
    assert [t.main_query for t in r.train_tasks()] == ["q0", "q1", "q2"]
    assert r.val_tasks() == []


def test_parquet_and_save_to_disk(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list([{"question": "a", "answer": "1"}, {"question": "b", "answer": "2"}])
    ds.to_parquet(str(tmp_path / "rows.parquet"))
    assert [t.main_query for t in reader(tmp_path / "rows.parquet").train_tasks()] == ["a", "b"]
    datasets.DatasetDict({"train": ds, "test": ds.select([1])}).save_to_disk(str(tmp_path / "saved"))
    r = reader(tmp_path / "saved")
    assert [t.main_query for t in r.val_tasks()] == ["b"]
    with pytest.raises(DataError, match="its splits: train, test"):
        reader(tmp_path / "saved", train="dev").train_tasks()


def test_rows_without_the_query_field_are_tasks_without_a_query(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text(json.dumps({"prompt": "a"}) + "\n")
    (task,) = reader(f).train_tasks()
    assert task.metadata == {"prompt": "a"} and not task.has_query


def test_hub_id_offline_says_how_to_point_at_local_copy(tmp_path):
    code = ("from astuner.task_reader.huggingface import HuggingfaceDatRepoReader as R\n"
            "from astuner.errors import DataError\n"
            "try:\n    R('gsm8k/main', None, 'train', 'test', 'question').train_tasks()\n"
            "except DataError as e:\n    print('DATAERROR', e)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert "DATAERROR" in proc.stdout, proc.stderr[-2000:]
    assert "'gsm8k/main' is neither a local copy nor fetched from the hub" in proc.stdout
    assert "point dataset_path at a local folder or file" in proc.stdout
    assert proc.stderr.strip() == ""  # no log lines or progress bars of datasets' own
    assert len(proc.stdout.strip()) - len("DATAERROR ") <= 300


@pytest.mark.parametrize("asked", ["val", "validation", "dev", "VAL"])
def test_a_local_folder_split_is_found_by_its_file_name_or_datasets_name(tmp_path, asked):
    """datasets names val.jsonl's split "validation"; a tune() asking for "val" (the file's name) failed."""
    from astuner.task_reader.huggingface import load_rows

    (tmp_path / "train.jsonl").write_text('{"question": "a", "answer": "1"}\n')
    (tmp_path / "val.jsonl").write_text('{"question": "b", "answer": "2"}\n{"question": "c", "answer": "3"}\n')
    assert [r["question"] for r in load_rows(str(tmp_path), None, asked)] == ["b", "c"]
    assert [r["question"] for r in load_rows(str(tmp_path), None, "train")] == ["a"]


def test_a_subset_the_local_copy_lacks_names_the_subset_key(gsm8k_dir):
    """agentscope-samples' math_agent asks for GSM8K's subset "main"; a local folder of its files has none, and the
    error named the dataset's path, not the subset that was wrong."""
    with pytest.raises(DataError, match=r"^astuner\.task_reader\.huggingface_dat_repo\.dataset_name: .* has no "
                                        r"subset 'main' \(ValueError: BuilderConfig 'main' not found"):
        reader(gsm8k_dir, name="main").train_tasks()
