"""What a run needs, checked before anything is written: the run folder's parent, the task source (every
row read as the run will read it; an environment service asked for its task ids), the model folder. The
CLI runs these for `--dry-run` too, so a dry run catches what the run would; a check that needs the network
(a hub dataset or model) is skipped there and said so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from astuner.config.notes import WarningNote
from astuner.config.sync_schedule import idle_keys
from astuner.errors import DataError, Found, RunDirError

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def check_exp_dir(exp_dir: Path, key: str = "--exp-dir", fix: str = "pick another --exp-dir") -> None:
    """`--exp-dir` (`key`: what the user set, e.g. a Trinity config's checkpoint_root_dir) must be a folder, or
    creatable as one, in which files can be made: tried in its nearest existing ancestor (a temporary folder made
    and removed), so /proc, a read-only mount and a full disk are refused like a folder without permission."""
    from astuner.records.storage import write_problem

    path = Path(exp_dir)
    if path.exists() and not path.is_dir():
        raise RunDirError(f"{key} {path} is a file, not a folder; {fix}")
    existing = path if path.exists() else next((p for p in path.absolute().parents if p.exists()), Path("/"))
    if not existing.is_dir():
        raise RunDirError(f"{key} {path}: {existing} is a file, not a folder; {fix}")
    why = write_problem(existing)
    if why:
        raise RunDirError(f"{key} {path}: no run folder can be made in {existing} ({why}); {fix}")


def _hub_only(cfg: Any, extra_roots: Sequence[Path]) -> bool:
    """Whether the tasks come from the hub (not read offline); a missing local path is a DataError here."""
    from astuner.config.paths import find_user_path, looks_like_hub_id
    from astuner.task_reader.huggingface import missing_path

    tr = cfg.task_reader
    if tr.type != "huggingface_dat_repo":
        return False
    hub = False
    for key in ("dataset_path", "validation_dataset_path"):
        path = getattr(tr.huggingface_dat_repo, key)
        if path and find_user_path(path, extra_roots) is None:
            if not looks_like_hub_id(path):
                raise DataError(missing_path(path, extra_roots, f"astuner.task_reader.huggingface_dat_repo.{key}"))
            hub = True
    return hub


def check_tasks(cfg: Any, extra_roots: Sequence[Path], offline: bool) -> str:
    """Read the training and validation tasks as the run will; a note on what was read."""
    from astuner.task_reader import build_task_reader

    if offline and _hub_only(cfg, extra_roots):
        return (f"dataset {cfg.task_reader.huggingface_dat_repo.dataset_path!r} is not a local copy: "
                f"not checked offline (the run reads it from the hub)")
    reader = build_task_reader(cfg, extra_roots)
    train = reader.train_tasks()
    val = reader.val_tasks()
    note = f"tasks: {len(train)} training, {len(val)} validation"
    bare = [t for t in train + val if not t.has_query]
    if bare and len(bare) == len(train) + len(val):  # raw rows are tasks: the workflow reads the rows
        note += f"; no task has a query: the workflow reads their rows (task {bare[0].task_id}: {bare[0].no_query})"
    from astuner.rollout.row_problems import uneven_note

    uneven = uneven_note(train, val, cfg.task_reader.query_field)  # rows that lack what most rows have
    return f"{note}; {uneven}" if uneven else note


def check_model(cfg: Any, extra_roots: Sequence[Path], offline: bool = True) -> str:
    """`model.path` must be a model folder (config.json naming a model type, tokenizer and weight files),
    a hub id, or a tiny model to create; a note on which. So must each `auxiliary_models` entry's path and each
    policy's own path."""
    notes = [check_model_at(cfg.model.path, cfg.model.tiny, "astuner.model.path", extra_roots, offline)]
    for name, entry in cfg.auxiliary_models.items():
        if entry.base_url:  # an endpoint: asked where the episodes run; its key must be in this environment
            from astuner.model.auxiliary import api_key

            api_key(entry.api_key_env, f"astuner.auxiliary_models.{name}.api_key_env")
            notes.append(f"auxiliary {name}: {entry.model} at {entry.base_url}")
            continue
        notes.append(f"auxiliary {name}: " + check_model_at(entry.path, entry.tiny, f"astuner.auxiliary_models.{name}",
                                                              extra_roots, offline))
    for name, policy in cfg.policies.items():
        if policy.path is not None:
            notes.append(f"policy {name}: " + check_model_at(policy.path, policy.tiny, f"astuner.policies.{name}.path",
                                                             extra_roots, offline))
    return "; ".join(notes)


def check_model_at(raw: str, tiny: Any, key: str, extra_roots: Sequence[Path], offline: bool) -> str:
    from astuner.config.paths import find_user_path, looks_like_hub_id, tried_paths
    from astuner.model.model_path import tiny_model_folder

    if tiny is not None:  # the folder is raw itself (from the cwd), where model_path creates it
        target = tiny_model_folder(raw)
        if not target.exists():
            return f"model: the tiny model {raw} is created on first use"
        found: Optional[Path] = target
    else:
        found = find_user_path(raw, extra_roots)
    if found is None:
        if Path(raw).expanduser().is_absolute() or not looks_like_hub_id(raw):
            raise DataError(f"{key}: no model folder {raw!r} (looked at {tried_paths(raw, extra_roots)}); "
                            f"create it or give a hub id (organisation/name)")
        return f"model {raw!r} is a hub id: not checked offline"
    if not found.is_dir():
        raise DataError(f"{key}: {found} is a file; name the model's folder")
    config = found / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{key}: {found} is not a model folder (no config.json)") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{key}: {config} is not valid JSON ({exc})".splitlines()[0]) from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise DataError(f"{key}: {config} names no model_type; it is not a transformers model's config")
    names = {p.name for p in found.iterdir()}
    if not any(n in names for n in _TOKENIZER_FILES):
        raise DataError(f"{key}: {found} has no tokenizer files ({', '.join(_TOKENIZER_FILES)})")
    if not any(n.endswith(_WEIGHT_SUFFIXES) for n in names):
        raise DataError(f"{key}: {found} has no weight files (*.safetensors, *.bin)")
    if not offline:  # the run loads it next anyway; a tokenizer without a chat template is refused here
        from astuner.model.engines.factory import load_tokenizer

        load_tokenizer(str(found))
    return f"model: {found} ({data['model_type']})"


def check_traces(cfg: Any, extra_roots: Sequence[Path]) -> str:
    """trainer_common.traces.store: a trace store that opens, with how many episodes it holds."""
    from astuner.config.paths import find_user_path
    from astuner.errors import DataError
    from astuner.records.trace_store import TraceStore

    raw = cfg.trainer_common.traces.store
    path = find_user_path(raw, extra_roots)
    if path is None:
        raise DataError(f"astuner.trainer_common.traces.store: {raw} not found (relative paths: from the working "
                        f"folder, then the config's folder and its parents)")
    try:
        store = TraceStore.read(path)
    except DataError as exc:
        raise DataError(f"astuner.trainer_common.traces.store: {exc}") from None
    try:
        episodes = store.episodes()
    finally:
        store.close()
    rewarded = [e for e in episodes if e["reward"] is not None]
    t = cfg.trainer_common.traces
    usable = [e for e in rewarded if t.mode != "sft" or t.min_reward is None or e["reward"] >= t.min_reward]
    if t.mode == "pg":  # its behaviour log-probs: a served episode's (an imported log has none)
        usable = [e for e in usable if e["source"] == "served"]
    if not usable:  # training reads only rewarded episodes: said now, not after a validation
        why = ("holds no episode" if not episodes else
               f"holds {len(episodes)} episodes, none with a reward (rate them: POST /v1/feedback while served, or "
               f"`astuner traces judge {raw} --conf ...`)" if not rewarded else
               f"holds {len(rewarded)} rewarded episodes, none served: traces.mode pg learns from the behaviour "
               f"log-probs recorded by astuner serve, which imported episodes have not; use traces.mode sft"
               if t.mode == "pg" else
               f"holds {len(rewarded)} rewarded episodes, none at or above traces.min_reward {t.min_reward:g}")
        raise DataError(f"astuner.trainer_common.traces.store: {path} {why}; nothing to train on")
    return f"traces: {path} ({len(episodes)} episodes, {len(rewarded)} with a reward)"


def policies_note(cfg: Any, roots: Sequence[Path] = ()) -> str:
    """The agent -> policy map as --dry-run prints it, on a backbone that trains several policies; what they
    cannot be is refused here, before anything starts."""
    from astuner.errors import ConfigError
    from astuner.model.policies import policy_map

    from astuner.backbone.debug.policies import check_supported
    from astuner.model.engines.factory import pick_engine

    problem = check_supported(cfg, pick_engine(cfg), roots)
    if problem:
        raise ConfigError(problem)
    return "policies: " + "; ".join(policy_map(cfg).describe())


def preflight(run_config: Any, exp_dir: Path, offline: bool, backbone: Any = None,
              exp_dir_key: tuple[str, str] = ("--exp-dir", "pick another --exp-dir"),
              found: Optional[Found] = None) -> list[str]:
    """Every check above, and what the machine gives the run (the `Backbone`'s `plan`: GPUs, engines, memory);
    notes for the user. Each check runs whatever the others found, unless it reads a key `found` holds as refused
    (or, for the policies and the plan, any refused key; the plan also needs the model folder checked); once a
    problem is found, what needs the network is not checked. Without `found`, raises what was found (every
    problem); with it, leaves them there."""
    from astuner.records.monitors import check_installed

    own = Found() if found is None else found
    cfg, roots = run_config.astuner, run_config.extra_roots
    own.attempt(check_exp_dir, exp_dir, *exp_dir_key)
    if own.sound("astuner.trainer_common.logger"):
        own.attempt(check_installed, cfg.trainer_common.logger)
    offline = offline or bool(own)  # a run refused already is not kept waiting for the hub: checked offline
    notes: list[str] = list(run_config.notes)  # the seed system's keys, as read
    if own.sound("astuner.task_reader"):
        notes.append(own.attempt(check_tasks, cfg, roots, offline)[1] or "")
    if cfg.trainer_common.traces.store and own.sound("astuner.trainer_common.traces"):
        notes.append(own.attempt(check_traces, cfg, roots)[1] or "")
    model_ok = own.sound("astuner.model", "astuner.auxiliary_models", "astuner.policies")
    if model_ok:
        model_ok, note = own.attempt(check_model, cfg, roots, offline)
        notes.append(note or "")
    notes = [note for note in notes if note]
    idle = idle_keys(cfg.trainer_common)
    if idle:
        notes.append(WarningNote(f"astuner.trainer_common.off_policy: {', '.join(idle)}: set, and changing nothing "
                                 f"in this configuration (docs/off_policy.md)"))
    if backbone is not None:
        notes += _backbone_notes(run_config, backbone, own, model_ok)
    if found is None:
        own.raise_all()
    return notes


def _backbone_notes(run_config: Any, backbone: Any, found: Found, model_ok: bool) -> list[str]:
    """What the backbone makes of the config: the features it refuses (its declaration), the policies, the keys it
    does not read, its machine plan."""
    from astuner.backbone.capabilities import refusal, refusals
    from astuner.config.keys import unread_by

    cfg, notes = run_config.astuner, []
    for problem in refusals(run_config, backbone.name, found.sound):
        found.add(problem)
    if found.bad_keys:  # the policies and the plan read much of the config: only a whole one
        return notes
    if cfg.policies and refusal(backbone.name, "several_policies") is None:
        notes.append(found.attempt(policies_note, cfg, run_config.extra_roots)[1])
    notes += backbone.notes(run_config)
    unread = unread_by(cfg, backbone.name)
    if unread:  # the declaration says which backbones read each key (docs/configuration.md)
        notes.append(f"set but not read by the {backbone.name} backbone (no effect there): {', '.join(unread)}")
    if model_ok:  # the plan sizes the engines from the model folder
        notes.append(found.attempt(backbone.plan, run_config)[1])
    return [note for note in notes if note]
