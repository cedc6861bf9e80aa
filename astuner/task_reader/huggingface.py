"""`huggingface_dat_repo` reader: `datasets.load_dataset` on a hub id or a local copy."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from loguru import logger

from astuner.config.paths import find_user_path, looks_like_hub_id, tried_paths
from astuner.errors import DataError
from astuner.schema import Task
from astuner.task_reader.rows import row_to_task, unique_ids

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
KEY = "astuner.task_reader.huggingface_dat_repo.dataset_path"
NAME_KEY = "astuner.task_reader.huggingface_dat_repo.dataset_name"


def _pick_split(dataset: Any, split: str, source: str) -> Any:
    if hasattr(dataset, "keys"):  # DatasetDict
        if split not in dataset:
            raise DataError(f"dataset {source} has no split {split!r}; its splits: {', '.join(dataset.keys())}; "
                            f"set astuner.task_reader.huggingface_dat_repo.training_split/validation_split")
        return dataset[split]
    return dataset


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """No log lines or progress bars from `datasets` while we load: our one-line error says what failed."""
    import datasets

    verbosity = datasets.logging.get_verbosity()
    bars = datasets.utils.logging.is_progress_bar_enabled()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()


def _first_line(exc: BaseException, limit: int = 120) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:limit]}"


def _load_local(path: Path, name: Optional[str], split: str) -> Any:
    try:
        with _quiet_datasets():
            return _read_local(path, name, split)
    except DataError:
        raise
    except Exception as exc:  # datasets' and pyarrow's errors on unreadable local data
        empty = _empty_data_file(path)
        if empty is not None:  # datasets says StopIteration (or "corresponds to no data") for it
            raise DataError(f"{empty}: the file holds no rows; add rows to it"
                            f"{', or remove it from the folder' if path.is_dir() else ''}") from None
        raise DataError(f"{KEY}: {path} cannot be read as a dataset: {_first_line(exc)}") from None


def _empty_data_file(path: Path) -> Optional[Path]:
    """The first data file of `path` (a file, or a folder's) holding nothing but whitespace, or None."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()
                                                 and p.suffix.lower() in _FILE_BUILDERS)
    for file in files:
        try:
            with open(file, "rb") as fh:
                while True:
                    chunk = fh.read(1 << 16)
                    if not chunk:
                        return file
                    if chunk.strip():
                        break
        except OSError:
            continue
    return None


def _read_local(path: Path, name: Optional[str], split: str) -> Any:
    import datasets

    if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "state.json").exists()):
        return _pick_split(datasets.load_from_disk(str(path)), split, str(path))
    if path.is_file():
        builder = _FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DataError(f"{KEY}: {path} is not a .jsonl/.json/.parquet/.csv file")
        return datasets.load_dataset(builder, data_files={"train": str(path)}, split="train")
    if path.is_dir() and not any(p.suffix.lower() in _FILE_BUILDERS for p in path.rglob("*") if p.is_file()):
        raise DataError(f"{KEY}: {path} holds no data files (.jsonl, .json, .parquet, .csv)")
    try:
        return datasets.load_dataset(str(path), name, split=_split_of_files(split))
    except ValueError as exc:
        if "Unknown split" in str(exc):
            raise DataError(f"dataset {path} has no split {split!r}: {exc}".splitlines()[0]) from None
        if name is not None and "BuilderConfig" in str(exc):  # datasets: "BuilderConfig 'main' not found. ..."
            raise DataError(f"{NAME_KEY}: {path} has no subset {name!r} ({_first_line(exc)}); remove it, or name one "
                            f"of its subsets") from None
        raise DataError(f"{KEY}: {path} cannot be loaded as a dataset: {exc}".splitlines()[0]) from None


def _split_of_files(split: str) -> str:
    """The split `datasets` names a folder's files by, for the name a user gives: files named val.jsonl or
    dev.jsonl are datasets' split "validation" (eval.jsonl: "test"), so split "val" asks for them (datasets'
    own table of file-name keywords)."""
    from datasets.data_files import SPLIT_KEYWORDS

    return next((str(canonical) for canonical, words in SPLIT_KEYWORDS.items() if split.lower() in words), split)


def _load_hub(dataset_id: str, name: Optional[str], split: str) -> Any:
    import datasets

    attempts = [(dataset_id, name)]
    parts = dataset_id.split("/")
    if name is None and len(parts) == 2:
        attempts.append((parts[0], parts[1]))  # 'gsm8k/main' = dataset gsm8k, configuration main
    last: Optional[BaseException] = None
    for path, config_name in attempts:
        try:
            with _quiet_datasets():
                return datasets.load_dataset(path, config_name, split=split)
        except ValueError as exc:
            if "Unknown split" in str(exc):
                raise DataError(f"dataset {dataset_id!r} has no split {split!r}: {exc}".splitlines()[0]) from None
            last = exc
        except Exception as exc:  # offline, not on the hub, no cache: all end in the message below
            last = exc
    raise DataError(f"{KEY}: dataset {dataset_id!r} is neither a local copy nor fetched from the hub "
                    f"({_first_line(last) if last else ''}); point dataset_path at a local folder or file")


def load_rows(dataset_path: str, dataset_name: Optional[str], split: str, extra_roots: Sequence[Path] = (),
              key: str = KEY) -> Any:
    """The rows of one split: a local copy when `dataset_path` names one, else the hub (when it can be a hub id:
    a path such as ./data/x or /opt/data/x that is not there is a DataError naming `key`)."""
    local = find_user_path(dataset_path, extra_roots)
    if local is not None:
        return _load_local(local, dataset_name, split)
    if not looks_like_hub_id(dataset_path):
        raise DataError(missing_path(dataset_path, extra_roots, key))
    return _load_hub(dataset_path, dataset_name, split)


def missing_path(dataset_path: str, extra_roots: Sequence[Path], key: str) -> str:
    return (f"{key}: {dataset_path!r} is no file or folder (tried {tried_paths(dataset_path, extra_roots)}) and cannot "
            f"be a hub id; point it at a local folder or file")


class HuggingfaceDatRepoReader:
    """Tasks from a hub dataset or a local copy; the query is read from `query_field`."""

    def __init__(self, dataset_path: str, dataset_name: Optional[str], training_split: str,
                 validation_split: Optional[str], query_field: str, extra_roots: Sequence[Path] = (),
                 validation_dataset_path: Optional[str] = None):
        self.dataset_path, self.dataset_name = dataset_path, dataset_name
        self.training_split, self.validation_split = training_split, validation_split
        self.validation_path = validation_dataset_path or dataset_path
        self.query_field = query_field
        self.extra_roots = extra_roots
        self.local = find_user_path(dataset_path, extra_roots)

    def _tasks(self, split: str, path: Optional[str] = None) -> list[Task]:
        path = path or self.dataset_path
        source = f"{path} [{split}]"
        key = KEY if path == self.dataset_path else "astuner.task_reader.huggingface_dat_repo.validation_dataset_path"
        rows = load_rows(path, self.dataset_name, split, self.extra_roots, key)
        tasks = [row_to_task(dict(row), i, split, self.query_field, f"{source} row {i}") for i, row in enumerate(rows)]
        if not tasks:
            raise DataError(f"{source}: the split holds no rows")
        return unique_ids(tasks, source)

    def train_tasks(self) -> list[Task]:
        return self._tasks(self.training_split)

    def val_tasks(self) -> list[Task]:
        if not self.validation_split:
            return []
        if self.validation_path != self.dataset_path:
            return self._tasks(self.validation_split, self.validation_path)
        if self.local is not None and self.local.is_file():
            logger.warning(f"{self.dataset_path} is a single file, so it is the training split; there is no "
                           f"validation split '{self.validation_split}' (set validation_split: null to silence this)")
            return []
        return self._tasks(self.validation_split)
