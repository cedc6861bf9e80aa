"""`dataset_file` reader: JSON-lines files of tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from astuner.config.paths import find_user_path, tried_paths
from astuner.errors import DataError
from astuner.schema import Task
from astuner.task_reader.rows import row_to_task, unique_ids


def read_jsonl_tasks(raw_path: str, split: str, query_field: str, extra_roots: Sequence[Path] = ()) -> list[Task]:
    path = find_user_path(raw_path, extra_roots)
    if path is None:
        key = f"astuner.task_reader.dataset_file.{'training' if split == 'train' else 'validation'}.file_path"
        raise DataError(f"{key}: {raw_path!r} does not exist (tried {tried_paths(raw_path, extra_roots)})")
    if not path.is_file():
        raise DataError(f"dataset file {path} ({split}) is a folder; name a JSON-lines file (for a folder of "
                        f"data files use type: huggingface_dat_repo)")
    if path.suffix.lower() in (".parquet", ".csv", ".arrow"):
        raise DataError(f"dataset file {path} ({split}) is not JSON lines; for {path.suffix} files use "
                        f"type: huggingface_dat_repo with dataset_path: {path}")
    tasks = []
    with open(path, encoding="utf-8", errors="strict") as fh:
        lines = _lines(fh, path)
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
            tasks.append(row_to_task(row, len(tasks), split, query_field, where))
    if not tasks:
        raise DataError(f"{path}: the file holds no tasks; add one JSON object per line")
    return unique_ids(tasks, str(path))


def _lines(fh, path: Path) -> list[str]:
    try:
        return fh.readlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}); dataset files are JSON lines") from None


class DatasetFileReader:
    """Tasks from `task_reader.dataset_file.{training,validation}.file_path`."""

    def __init__(self, training: str, validation: Optional[str], query_field: str, extra_roots: Sequence[Path] = ()):
        self.training, self.validation = training, validation
        self.query_field, self.extra_roots = query_field, extra_roots

    def train_tasks(self) -> list[Task]:
        return read_jsonl_tasks(self.training, "train", self.query_field, self.extra_roots)

    def val_tasks(self) -> list[Task]:
        if not self.validation:
            return []
        return read_jsonl_tasks(self.validation, "val", self.query_field, self.extra_roots)
