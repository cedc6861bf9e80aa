"""Where the policy model is: `model.path` as a local folder when it is one (found the way the CLI finds
user files), the tiny model created there first when `model.tiny` asks for it, else the hub id as given.
Every backbone resolves the path here, so a relative path or a tiny model means the same on all of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loguru import logger

from astuner.config.paths import find_user_path, looks_like_hub_id


def resolve_model_path(cfg: Any, extra_roots: list[Path]) -> str:
    """model.path as a local folder when it is one (creating the tiny model there if `model.tiny` asks
    for it), else the hub id as given; a folder path that does not exist is a `DataError`."""
    return resolve_local_model(cfg.model.path, cfg.model.tiny, "astuner.model.path", extra_roots,
                               lambda: _tiny_corpus(cfg, extra_roots))


def resolve_local_model(raw: str, tiny: Any, key: str, extra_roots: list[Path], corpus: Any = None) -> str:
    """`raw` as a local model folder, or the hub id as given. With `tiny` (a TinyModelConfig) the folder is
    `raw` itself (relative: from the cwd, where it is created when absent): a folder of that name elsewhere
    (a parent of the config's folder) is never taken for it. `corpus()`: texts the tiny tokenizer learns."""
    if tiny is not None:
        from astuner.model.tiny_model import DEFAULT_CORPUS, build_tiny_model, tiny_kv_heads

        target = tiny_model_folder(raw)
        if not target.exists():
            logger.info(f"creating the tiny model {target} (seed {tiny.seed}, tokenizer {tiny.tokenizer})")
            build_tiny_model(target, seed=tiny.seed, hidden_size=tiny.hidden_size, layers=tiny.layers,
                             heads=tiny.heads, kv_heads=tiny_kv_heads(tiny.heads), tokenizer=tiny.tokenizer,
                             corpus=corpus() if corpus else DEFAULT_CORPUS)
        return str(target)
    found = find_user_path(raw, extra_roots)
    if found is not None:
        return str(found)
    if not looks_like_hub_id(raw):
        from astuner.config.paths import tried_paths
        from astuner.errors import DataError

        raise DataError(f"{key}: no model folder {raw!r} (looked at {tried_paths(raw, extra_roots)}); "
                        f"create it first, or give a hub id (organisation/name)")
    return raw


def tiny_model_folder(raw: str) -> Path:
    """Where a tiny model named `raw` lives (and is created): `raw` itself, a relative one from the cwd."""
    target = Path(raw).expanduser()
    return target if target.is_absolute() else Path.cwd() / target


def _tiny_corpus(cfg: Any, extra_roots: list[Path]) -> list[str]:
    """The tokenizer of a tiny model is trained on the run's tasks, so it covers their words."""
    from astuner.task_reader import build_task_reader
    from astuner.model.tiny_model import DEFAULT_CORPUS

    reader = build_task_reader(cfg, extra_roots)
    tasks = reader.train_tasks() + reader.val_tasks()
    texts = [t.query_or_none or "" for t in tasks] + [str(v) for t in tasks for v in t.metadata.values()]
    return DEFAULT_CORPUS + texts
