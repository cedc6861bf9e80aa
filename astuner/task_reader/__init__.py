"""Task readers: where a run's tasks come from (`astuner.task_reader.type`)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

from astuner.config.schema import AstunerConfig
from astuner.schema import Task


class TaskReader(Protocol):
    def train_tasks(self) -> list[Task]: ...

    def val_tasks(self) -> list[Task]:
        """The validation tasks; [] when the config names no validation set."""
        ...


class FirstValTasks:
    """`reader` with only its first `n` validation tasks (`task_reader.max_val_tasks`)."""

    def __init__(self, reader: TaskReader, n: int):
        self.reader, self.n = reader, n

    def train_tasks(self) -> list[Task]:
        return self.reader.train_tasks()

    def val_tasks(self) -> list[Task]:
        return self.reader.val_tasks()[:self.n]


def build_task_reader(cfg: AstunerConfig, extra_roots: Sequence[Path] = ()) -> TaskReader:
    """The reader `cfg.task_reader.type` names; relative paths resolve against the cwd, then `extra_roots`."""
    reader = _reader(cfg, extra_roots)
    n = cfg.task_reader.max_val_tasks
    return reader if n is None else FirstValTasks(reader, n)


def _reader(cfg: AstunerConfig, extra_roots: Sequence[Path]) -> TaskReader:
    tr = cfg.task_reader
    if tr.type == "huggingface_dat_repo":
        from astuner.task_reader.huggingface import HuggingfaceDatRepoReader

        h = tr.huggingface_dat_repo
        return HuggingfaceDatRepoReader(h.dataset_path, h.dataset_name, h.training_split, h.validation_split,
                                        tr.query_field, extra_roots, h.validation_dataset_path)
    if tr.type == "dataset_file":
        from astuner.task_reader.dataset_file import DatasetFileReader

        return DatasetFileReader(tr.dataset_file.training.file_path, tr.dataset_file.validation.file_path,
                                 tr.query_field, extra_roots)
    if tr.type == "env_service":
        from astuner.task_reader.env_service import EnvServiceReader

        e = tr.env_service
        return EnvServiceReader(e.env_url, e.env_type, e.training_split, e.validation_split, e.timeout_s, e.retries,
                                e.retry_backoff_s)
    if tr.type == "random_dummy":
        from astuner.task_reader.random_dummy import RandomDummyReader

        return RandomDummyReader()
    raise ValueError(f"unknown task reader type {tr.type!r}")  # validate_astuner_tree rejects this earlier


def has_validation(cfg: AstunerConfig) -> bool:
    """Whether the config names a validation set (decided from the config alone, nothing is read)."""
    tr = cfg.task_reader
    if tr.type == "huggingface_dat_repo":
        return bool(tr.huggingface_dat_repo.validation_split)
    if tr.type == "dataset_file":
        return bool(tr.dataset_file.validation.file_path)
    if tr.type == "random_dummy":
        return True
    return bool(tr.env_service.validation_split)
