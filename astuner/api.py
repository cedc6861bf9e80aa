"""The function API: `tune(workflow_func=..., judge_func=..., train_dataset=..., model=..., algorithm=...)`.

It builds an ordinary astuner config (written into the run folder as `config.yaml`, so
`astuner --conf <that file>` reruns it) and runs the chosen backbone. Runs land in
`./checkpoints/{project_name}/{experiment_name}/` with `global_step_N/` and `monitor/tensorboard/`.
"""

from __future__ import annotations

import inspect
import json
import numbers
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Optional

from astuner.errors import UserError


def arg(default: Any, key: Optional[str] = None) -> Any:
    """A tune() argument's field: agentscope.tuner's default, and the astuner key (declared in config/schema.py)
    it sets as it is; None for an argument whose keys are computed (max_model_len, max_tokens, ...)."""
    return field(default=default, metadata={"key": key})


def direct_keys(obj: Any, cls: type) -> dict[str, Any]:
    """The astuner keys the fields of `cls` set as they are, read from `obj` (ours, or agentscope.tuner's object of
    the same name: duck-typed), as a nested mapping (without the `astuner.` root)."""
    tree: dict[str, Any] = {}
    for f in fields(cls):
        if f.metadata.get("key"):
            *parents, leaf = f.metadata["key"].split(".")[1:]
            node = tree
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = getattr(obj, f.name)
    return tree


@dataclass
class DatasetConfig:
    """A dataset: a local folder with train.jsonl/test.jsonl (or parquet/json), one file, a save_to_disk
    folder, or anything `datasets.load_dataset` takes (hub id + `name`)."""

    path: str
    name: Optional[str] = None
    split: str = "train"
    total_epochs: int = 1
    total_steps: Optional[int] = None

    def preview(self, n: int = 5) -> list[dict[str, Any]]:
        """Print the first `n` rows as JSON and return them."""
        from astuner.task_reader.huggingface import load_rows

        rows = load_rows(self.path, self.name, self.split)
        first = [dict(rows[i]) for i in range(min(n, len(rows)))]
        for row in first:
            print(json.dumps(row, ensure_ascii=False, default=str))
        return first


@dataclass
class TunerModelConfig:
    model_path: str = field(metadata={"key": "astuner.model.path"})
    max_model_len: int = field(metadata={"key": "astuner.rollout.max_model_len"})
    temperature: float = arg(1.0, "astuner.rollout.temperature")
    top_p: float = arg(1.0, "astuner.rollout.top_p")
    max_tokens: int = arg(8192)  # the per-call limit and the response budget: see model_keys
    enable_thinking: Optional[bool] = arg(None)
    tensor_parallel_size: int = arg(1, "astuner.rollout.tensor_model_parallel_size")
    inference_engine_num: int = arg(1, "astuner.trainer_common.trinity_only__n_vllm_engine")
    tool_call_parser: str = arg("hermes", "astuner.rollout.tool_call_parser")
    reasoning_parser: Optional[str] = arg(None)
    tinker_config: Optional["TinkerConfig"] = arg(None)  # agentscope's: training on Tinker's service (refused)


@dataclass
class TinkerConfig:
    """agentscope.tuner's LoRA settings for training on Tinker's hosted service, which astuner does not train on:
    tune() refuses a model that sets it, naming astuner's LoRA keys (its own backbones train the adapter)."""
    rank: int = 16
    seed: Optional[int] = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True


@dataclass
class AlgorithmConfig:
    algorithm_type: str = arg("multi_step_grpo", "astuner.trainer_common.algorithm.adv_estimator")
    learning_rate: float = arg(1e-6, "astuner.trainer_common.optim.lr")
    group_size: int = arg(8, "astuner.rollout.num_repeat")
    batch_size: int = arg(32, "astuner.data.train_batch_size")
    save_interval_steps: int = arg(100, "astuner.trainer_common.save_freq")
    eval_interval_steps: int = arg(100)  # trainer_common.test_freq where there is a validation set


# the astuner keys tune()'s arguments set, as tune() calls them (errors and notes name what the user wrote)
OTHER_ARGUMENTS = {
    "astuner.rollout.agentscope_workflow": "workflow_func",
    "astuner.task_judge.judge_protocol": "judge_func",
    "astuner.task_reader.huggingface_dat_repo.dataset_path": "DatasetConfig.path",
    "astuner.task_reader.huggingface_dat_repo.dataset_name": "DatasetConfig.name",
    "astuner.task_reader.huggingface_dat_repo.training_split": "DatasetConfig.split (train_dataset)",
    "astuner.task_reader.huggingface_dat_repo.validation_split": "DatasetConfig.split (eval_dataset)",
    "astuner.trainer_common.total_epochs": "DatasetConfig.total_epochs",
    "astuner.trainer_common.total_training_steps": "DatasetConfig.total_steps (train_dataset)",
    "astuner.data.max_prompt_length": "TunerModelConfig.max_model_len - max_tokens",
    "astuner.data.max_response_length": "TunerModelConfig.max_tokens",
    "astuner.rollout.max_response_length_in_one_turn": "TunerModelConfig.max_tokens",
    "astuner.trainer_common.test_freq": "AlgorithmConfig.eval_interval_steps",
    "astuner.rollout.multi_turn.max_sample_per_task": "tune(max_samples_per_episode=)",
    "astuner.rollout.compute_madness_checklist": "tune(madness_checks=)",
    "astuner.trainer_common.logger": "tune(monitor_type=)",
}


def tune_argument_names() -> dict[str, str]:
    """astuner key -> the tune() argument that sets it."""
    names = {f.metadata["key"]: f"{cls.__name__}.{f.name}" for cls in (TunerModelConfig, AlgorithmConfig)
             for f in fields(cls) if f.metadata.get("key")}
    return {**names, **OTHER_ARGUMENTS}


def as_tune_arguments(text: str) -> str:
    """`text` with each astuner key tune()'s arguments set named as that argument (the key in brackets)."""
    names = tune_argument_names()
    return re.sub(r"astuner(?:\.[A-Za-z_0-9]+)+",
                  lambda m: f"{names[m.group(0)]} ({m.group(0)})" if m.group(0) in names else m.group(0), text)


def _check_function(fn: Any, role: str, names: tuple[str, str]) -> None:
    expected = f"an async function ({names[0]}, {names[1]}, auxiliary_models=None)"
    if not inspect.iscoroutinefunction(fn):
        raise UserError(f"{role} must be {expected}; got {fn!r}" + ("" if callable(fn) else " (not callable)"))
    params = list(inspect.signature(fn).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 or [p.name for p in positional[:2]] != list(names):
        got = ", ".join(p.name for p in params) or "nothing"
        raise UserError(f"{role} {fn.__name__} must take ({names[0]}, {names[1]}, auxiliary_models=None); it takes "
                        f"({got})")
    if not any(p.name == "auxiliary_models" or p.kind == p.VAR_KEYWORD for p in params):
        raise UserError(f"{role} {fn.__name__} must accept auxiliary_models=None (the auxiliary models by name)")


def plugin_string(fn: Callable[..., Any]) -> str:
    """How the written config names a function: its module, or its file for a script."""
    if fn.__module__ == "__main__":
        return f"{Path(inspect.getfile(fn)).resolve()}->{fn.__name__}"
    return f"{fn.__module__}->{fn.__qualname__}"


def build_config(*, workflow_func: Callable, judge_func: Optional[Callable], train_dataset: DatasetConfig,
                 eval_dataset: Optional[DatasetConfig], model: TunerModelConfig, algorithm: AlgorithmConfig,
                 project_name: str, experiment_name: str, monitor_type: Optional[str],
                 rewrites: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The astuner tree (as a YAML-ready mapping) the arguments describe; `rewrites`: the caps and rewrites
    (tune_rewrites), none by default."""
    from astuner.backbone.translate_common import deep_merge

    tree: dict[str, Any] = {"project_name": project_name, "experiment_name": experiment_name,
                            **(rewrites or tune_rewrites(None, None))}
    for part in (dataset_keys(train_dataset, eval_dataset), model_keys(model),
                 algorithm_keys(algorithm, eval_dataset is not None)):
        tree = deep_merge(tree, part)
    tree = deep_merge(tree, {
        "rollout": {"agentscope_workflow": plugin_string(workflow_func)},
        "task_judge": {"judge_protocol": plugin_string(judge_func) if judge_func else None},
        "trainer_common": monitor_logger(monitor_type)})
    return {"astuner": tree}


def tune_rewrites(max_samples_per_episode: Optional[int], madness_checks: Optional[Any],
                  only_given: bool = False) -> dict[str, Any]:
    """What tune() does to an episode's samples and reward beyond the workflow's own reward: by default nothing,
    as agentscope.tuner and Trinity-RFT (every trained call is a sample; no madness check replaces a reward).
    `only_given`: the keys of the arguments given (not None) alone."""
    if max_samples_per_episode is not None and (isinstance(max_samples_per_episode, bool)
                                                or not isinstance(max_samples_per_episode, int)
                                                or max_samples_per_episode < 1):
        raise UserError(f"tune(max_samples_per_episode=) must be a positive integer or None (every sample), got "
                        f"{max_samples_per_episode!r}")
    if isinstance(madness_checks, str):
        madness_checks = [madness_checks]
    rollout: dict[str, Any] = {}
    if max_samples_per_episode is not None or not only_given:
        rollout["multi_turn"] = {"max_sample_per_task": max_samples_per_episode}
    if madness_checks is not None or not only_given:
        rollout["compute_madness_checklist"] = list(madness_checks or [])
    return {"rollout": rollout}


def dataset_keys(train_dataset: DatasetConfig, eval_dataset: Optional[DatasetConfig]) -> dict[str, Any]:
    """The astuner keys `train_dataset` (and `eval_dataset`: no validation without one) set."""
    hf: dict[str, Any] = {"dataset_path": train_dataset.path, "dataset_name": train_dataset.name,
                          "training_split": train_dataset.split,
                          "validation_split": eval_dataset.split if eval_dataset else None}
    if eval_dataset is not None and eval_dataset.path != train_dataset.path:
        hf["validation_dataset_path"] = eval_dataset.path
    return {"task_reader": {"type": "huggingface_dat_repo", "huggingface_dat_repo": hf},
            "trainer_common": {"total_epochs": train_dataset.total_epochs,
                               "total_training_steps": train_dataset.total_steps}}


def model_keys(model: TunerModelConfig) -> dict[str, Any]:
    """The astuner keys `model` sets: `max_tokens` is both the per-call limit and the response budget; the
    prompt gets the rest of `max_model_len`."""
    for name in ("max_model_len", "max_tokens"):  # the keys they set are integers: nan, inf, 1.5 are refused here
        value = getattr(model, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            raise UserError(f"TunerModelConfig.{name} must be a positive integer (tokens), got {value!r}")
    if model.max_tokens >= model.max_model_len:
        raise UserError(f"TunerModelConfig.max_tokens ({model.max_tokens}) must be smaller than max_model_len "
                        f"({model.max_model_len}): the prompt needs room too")
    tinker = getattr(model, "tinker_config", None)
    if tinker is not None:
        raise UserError(f"TunerModelConfig.tinker_config: Tinker is a hosted training service, which astuner does "
                        f"not train on; astuner trains a LoRA adapter on its own backbones: astuner.model.lora.rank: "
                        f"{getattr(tinker, 'rank', 16)} (and lora.target_modules) in a config_path YAML, with "
                        f"tinker_config left None")
    from astuner.backbone.translate_common import deep_merge

    chat_kwargs = {} if model.enable_thinking is None else {"enable_thinking": model.enable_thinking}
    return deep_merge(direct_keys(model, TunerModelConfig), {
        "data": {"max_prompt_length": model.max_model_len - model.max_tokens, "max_response_length": model.max_tokens},
        "rollout": {"max_response_length_in_one_turn": min(model.max_tokens, model.max_model_len - 1),
                    "chat_template_kwargs": chat_kwargs, "reasoning_parser": model.reasoning_parser or "auto"}})


def algorithm_keys(algorithm: AlgorithmConfig, validates: bool) -> dict[str, Any]:
    """The astuner keys `algorithm` sets (`eval_interval_steps` only where there is a validation set)."""
    from astuner.backbone.translate_common import deep_merge
    from astuner.config.schema_trainer import ESTIMATORS

    if algorithm.algorithm_type not in ESTIMATORS:
        raise UserError(f"AlgorithmConfig.algorithm_type {algorithm.algorithm_type!r} is not supported; use "
                        f"{' or '.join(repr(e) for e in reversed(ESTIMATORS))}")
    return deep_merge(direct_keys(algorithm, AlgorithmConfig),
                      {"trainer_common": {"test_freq": algorithm.eval_interval_steps if validates else -1}})


def file_overrides(*, workflow_func: Callable, judge_func: Optional[Callable], train_dataset: Optional[DatasetConfig],
                   eval_dataset: Optional[DatasetConfig], model: Optional[TunerModelConfig],
                   algorithm: Optional[AlgorithmConfig], project_name: str, experiment_name: str,
                   monitor_type: Optional[str], base: dict[str, Any]) -> dict[str, Any]:
    """What the arguments given change in the config file `base` (an astuner tree): each argument its own keys;
    without `judge_func` the file's judge scores. `train_dataset` replaces the task reader; a validation set
    the file reads from its dataset stays (unless `eval_dataset` replaces it)."""
    from astuner.backbone.translate_common import deep_merge

    tree: dict[str, Any] = {"project_name": project_name, "experiment_name": experiment_name,
                            "rollout": {"agentscope_workflow": plugin_string(workflow_func)},
                            "trainer_common": monitor_logger(monitor_type)}
    if judge_func is not None:
        tree["task_judge"] = {"judge_protocol": plugin_string(judge_func)}
    old = ((base.get("astuner") or {}).get("task_reader") or {})
    old_hf = old.get("huggingface_dat_repo") or {}
    if train_dataset is not None:
        part = dataset_keys(train_dataset, eval_dataset)
        hf = part["task_reader"]["huggingface_dat_repo"]
        if eval_dataset is None:
            del hf["validation_split"]
            if old.get("type", "huggingface_dat_repo") == "huggingface_dat_repo" and old_hf.get("dataset_path") \
                    and not old_hf.get("validation_dataset_path") and old_hf.get("dataset_path") != train_dataset.path:
                hf["validation_dataset_path"] = old_hf["dataset_path"]  # the file's validation set, where it was
        tree = deep_merge(tree, part)
    elif eval_dataset is not None:
        train_path = old_hf.get("dataset_path")
        tree = deep_merge(tree, {"task_reader": {"huggingface_dat_repo": {
            "validation_split": eval_dataset.split,
            "validation_dataset_path": None if eval_dataset.path == train_path else eval_dataset.path}}})
    if model is not None:
        tree = deep_merge(tree, model_keys(model))
    if algorithm is not None:
        tree = deep_merge(tree, algorithm_keys(algorithm, True))
    return {"astuner": tree}


def monitor_logger(monitor_type: Optional[str]) -> dict[str, Any]:
    """agentscope.tuner's monitor_type (one of tensorboard, wandb, swanlab, mlflow; None = tensorboard) as
    trainer_common.logger."""
    if monitor_type is None:
        return {}
    from astuner.config.schema_trainer import LOGGERS

    choices = tuple(name for name in LOGGERS if name != "console")
    if monitor_type not in choices:
        raise UserError(f"monitor_type {monitor_type!r} is not supported; use one of {', '.join(choices)} (or None)")
    return {"logger": ["console", monitor_type]}


def _load_composed(tree: dict[str, Any], config_path: Optional[str], translation: Any,
                   root_parent: Path) -> Any:
    """The RunConfig of the astuner tree tune() composed, read as `astuner --conf` reads a file (staged in a
    temporary folder: nothing is written beside the run before its checks pass). Relative paths resolve from the
    cwd, then from the config file's folder and the run folder's parent (and their parents)."""
    import tempfile

    import yaml

    from astuner.config import load_run_config

    with tempfile.TemporaryDirectory(prefix="astuner-tune-") as folder:
        staged = Path(folder) / "tune.yaml"  # the tree names the experiment (a bad name is refused by its key)
        staged.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
        try:
            run = load_run_config(staged)
        except UserError as exc:
            # the staged file is gone: say what the config came from (and, for a Trinity config, which of its
            # keys the refused astuner keys came from); one problem on one line, several as a count and one per line
            lines = [re.sub(rf"^{re.escape(str(staged))}(:\d+)?: ", "", line) for line in str(exc).splitlines()]
            lines = lines if config_path or translation is not None else [as_tune_arguments(x) for x in lines]
            if translation is None:
                origin = f"in the config tune() composed from {config_path or 'its arguments'}"
                raise type(exc)(f"{lines[0]} ({origin})" if len(lines) == 1 else
                                f"{len(lines)} problems {origin}:" + "".join(f"\n  - {x}" for x in lines)) from None
            text = lines[0] if len(lines) == 1 else f"{len(lines)} problems:" + "".join(f"\n  - {x}" for x in lines)
            raise _from_trinity(type(exc), text, config_path) from None
    roots = [Path(config_path).absolute().parent] if config_path else []
    roots.append(root_parent.absolute())
    run.extra_roots = list(dict.fromkeys(p for root in roots for p in (root, *root.parents)))
    return run


def _read_config_file(path: Path) -> dict[str, Any]:
    """The YAML mapping in `path`, or UserError saying why there is none."""
    import yaml

    if not path.is_file():
        raise UserError(f"config_path {str(path)!r} is not a file; name an astuner YAML or a Trinity-RFT config file")
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = " ".join(str(exc).split())[:200]
        raise UserError(f"config_path {str(path)!r} is not readable YAML ({first})") from None
    if tree is not None and not isinstance(tree, dict):
        raise UserError(f"config_path {str(path)!r} holds {type(tree).__name__}, not a mapping of config keys")
    return tree or {}


def _from_trinity(kind: type, text: str, config_path: Optional[str]) -> UserError:
    """`text`, naming astuner keys, with the keys of the Trinity-RFT config they were translated from."""
    from astuner.compat.trinity import config as trinity_config

    return kind(f"{text} (translated from the Trinity-RFT config {config_path}: {trinity_config.source_hint(text)})")


def _without_empty_trinity(merged: dict[str, Any]) -> dict[str, Any]:
    """The config as written into the run folder: a `trinity:` subtree holding only empty mappings (the
    defaults' `trinity: {trainer: {}}`) is left out."""
    def empty(node: Any) -> bool:
        return isinstance(node, dict) and all(empty(v) for v in node.values())

    return {k: v for k, v in merged.items() if not (k == "trinity" and empty(v))}


def tune(*, workflow_func: Callable, judge_func: Optional[Callable] = None,
         train_dataset: Optional[DatasetConfig] = None, eval_dataset: Optional[DatasetConfig] = None,
         model: Optional[TunerModelConfig] = None, auxiliary_models: Optional[dict[str, Any]] = None,
         algorithm: Optional[AlgorithmConfig] = None, project_name: Optional[str] = None,
         experiment_name: Optional[str] = None, monitor_type: Optional[str] = None,
         config_path: Optional[str] = None, backbone: str = "debug", resume: Optional[bool] = None,
         max_samples_per_episode: Optional[int] = None, madness_checks: Optional[Any] = None) -> Path:
    """Train `workflow_func`'s agent; returns the run folder.

    `config_path` is an astuner YAML (an `astuner:` tree) or a Trinity-RFT config file, as agentscope.tuner
    takes (top-level `project`, `name`, `algorithm`, `model`, `buffer`, ...): that one is translated key by key
    (`astuner/compat/trinity/config.py`); a key with no astuner meaning goes to Trinity-RFT with backbone
    "trinity" and is refused (UserError naming it) with "debug" or "verl". Each argument given overrides the
    file's keys of the same meaning. The run folder is `./checkpoints/{project}/{experiment}/` (a Trinity
    config's `checkpoint_root_dir`, `project`, `group` and `name` place it as Trinity would). `resume`: continue
    the run in that folder; None = the Trinity config's `continue_from_checkpoint`, else no. `backbone` "verl" /
    "trinity" run on the Ray cluster named by RAY_ADDRESS, else on a Ray head started for the run (as
    `astuner --with-ray`). Before anything is written, the checks `astuner --conf` runs (the run folder, the
    trackers, every task row, the model folder) pass, or UserError says what to fix and nothing is left behind.

    As agentscope.tuner, every trained call of an episode is a sample and the workflow's reward stands:
    `max_samples_per_episode` caps an episode's samples (those with the most generated tokens are kept) and
    `madness_checks` (["nonsense", "wrong_toolcall"]) gives an episode failing one astuner's madness reward;
    both are logged when they act. A Trinity-RFT config file sets them (and any astuner key) in an `astuner:`
    section; an astuner YAML keeps its own unless these arguments are given."""
    from loguru import logger

    from astuner.backbone.translate_common import deep_merge
    from astuner.backbone import get_backbone
    from astuner.plugins import Plugins
    from astuner.records.run_dir import holds_run
    from astuner.compat.trinity import config as trinity_config

    from astuner.records.progress import quiet_libraries

    quiet_libraries()  # the libraries' bars and advisory warnings off (ASTUNER_VERBOSE=1 keeps them)
    from astuner.model.openmp import prefer_passive_waits

    prefer_passive_waits()  # idle OpenMP threads sleep, unless torch is imported already (the engine says so then)
    _check_function(workflow_func, "workflow_func", ("task", "model"))
    try:
        served, in_process = split_auxiliary_models(auxiliary_models or {})
    except TypeError as exc:
        raise UserError(str(exc)) from None
    if in_process and get_backbone(backbone).uses_ray:
        raise UserError(f"tune(auxiliary_models=...): {', '.join(in_process)} are chat model objects of this process, "
                        f"which the {backbone} backbone's Ray workers cannot reach; give a TunerModelConfig (the "
                        f"backbone serves it) or an endpoint in astuner.auxiliary_models (base_url, model, api_key_env)")
    if judge_func is not None:
        _check_function(judge_func, "judge_func", ("task", "response"))
    if config_path is None and (train_dataset is None or model is None):
        raise UserError("tune() needs train_dataset and model (or a config_path that names them)")
    base: dict[str, Any] = {}
    translation = None
    if config_path is not None:
        base = _read_config_file(Path(config_path))
        if "astuner" not in base and not trinity_config.is_trinity_config(base):
            from astuner.config.compose import unknown_top_keys

            raise UserError(f"config_path {str(config_path)!r} is neither an astuner YAML (an astuner: section) nor a "
                            f"Trinity-RFT config; its top-level keys: "
                            f"{unknown_top_keys(list(base), {'astuner', *trinity_config.TOP_LEVEL}) or ', '.join(base)}")
        if trinity_config.is_trinity_config(base):
            given = {"train_dataset": train_dataset, "eval_dataset": eval_dataset, "model": model,
                     "algorithm": algorithm, "project_name": project_name, "experiment_name": experiment_name,
                     "monitor_type": monitor_type}
            translation = trinity_config.translate(
                trinity_config.load(config_path), backbone=backbone, source=str(config_path),
                supplied={arg for arg, value in given.items() if value is not None},
                arguments=trinity_config.argument_values(algorithm, model))
            base = translation.tree
    named = (base.get("astuner") or {}) if translation else {}  # an astuner YAML's names stay tune()'s
    project = project_name or named.get("project_name") or "AgentScope"
    name = experiment_name or named.get("experiment_name") or time.strftime("Experiment-%Y%m%d-%H%M%S")
    root_parent = trinity_config.run_parent(translation, project, Path.cwd())
    if resume is None:
        resume = bool(translation and translation.continue_from_checkpoint)
        if translation and not resume and holds_run(root_parent / name):
            name = f"{name}_{time.strftime('%Y%m%d%H%M%S')}"  # Trinity's continue_from_checkpoint: false
    if config_path is None:
        overrides = build_config(workflow_func=workflow_func, judge_func=judge_func, train_dataset=train_dataset,
                                 eval_dataset=eval_dataset, model=model, algorithm=algorithm or AlgorithmConfig(),
                                 project_name=project, experiment_name=name, monitor_type=monitor_type,
                                 rewrites=tune_rewrites(max_samples_per_episode, madness_checks))
    else:
        if translation is not None:  # tune()'s defaults, under what the file's astuner: section sets
            base = deep_merge({"astuner": tune_rewrites(None, None)}, base)
        overrides = deep_merge(file_overrides(
            workflow_func=workflow_func, judge_func=judge_func, train_dataset=train_dataset, eval_dataset=eval_dataset,
            model=model, algorithm=algorithm, project_name=project, experiment_name=name, monitor_type=monitor_type,
            base=base), {"astuner": tune_rewrites(max_samples_per_episode, madness_checks, only_given=True)})
    composed = deep_merge(base, overrides)
    if served:  # each replaces the file's entry of its name whole; the run's config.yaml records it
        section = composed.setdefault("astuner", {})
        section["auxiliary_models"] = {**(section.get("auxiliary_models") or {}), **served}
    run = _load_composed(composed, config_path, translation, root_parent)
    judge = judge_func
    if judge is None and run.astuner.task_judge.judge_protocol:
        from astuner.plugins import resolve_plugins

        judge = resolve_plugins(run).judge

    def explain(exc: Exception) -> Exception:
        if str(exc).startswith(("workflow_func", "judge_func")):  # the arguments' own functions: no file key
            return exc
        if translation is not None:
            return _from_trinity(type(exc), str(exc), config_path)
        return exc if config_path is not None else type(exc)(as_tune_arguments(str(exc)))

    def key_name(key: str) -> str:
        if key == "astuner.rollout.agentscope_workflow" or (key == "astuner.task_judge.judge_protocol" and judge_func):
            return OTHER_ARGUMENTS[key]  # the function tune() was given, whatever the file says
        return as_tune_arguments(key) if config_path is None else key

    def log_translation(run_dir: Any) -> None:
        if translation is None:
            return
        unread = "; ".join(f"{key} is not read ({why})" for key, why in translation.ignored.items())
        unread += "".join(f"; {key} is taken as the {backbone} backbone's own way ({how})"
                          for key, how in translation.approximated.items())
        if translation.trinity_only:
            unread += f"; applied on backbone trinity only: {', '.join(translation.trinity_only)}"
        logger.info(f"tune: {config_path} is a Trinity-RFT config, translated into {run_dir.config_path}"
                    + (f"; handed to Trinity-RFT: {', '.join(translation.passed)}" if translation.passed else "")
                    + (f"; taken as the {backbone} backbone's own weight sync (it trains and rolls out in step): "
                       f"{', '.join(translation.accepted)}" if translation.accepted else "")
                    + (f"; {unread}" if unread else ""))
        for warning in translation.warnings:
            logger.warning(warning)

    from astuner.run import RunRequest, execute

    # the CLI's sequence: its checks before anything is written (a tune() that fails them leaves no run folder),
    # and a run that ends before its first step is marked so that the fixed rerun starts afresh. verl / trinity
    # run on Ray: the cluster in RAY_ADDRESS (or the one `ray start` recorded), else a head private to this run,
    # as `astuner --with-ray` does
    run_dir = execute(RunRequest(
        config=run, plugins=Plugins(workflow=workflow_func, judge=judge), backbone=backbone, exp_dir=root_parent,
        resume=resume, with_ray=get_backbone(backbone).uses_ray, layout="tune", merged=_without_empty_trinity(run.merged),
        auxiliary_models=in_process, explain=explain, on_prepared=log_translation, key_name=key_name,
        exp_dir_key=(("the run folder (from checkpoint_root_dir)", "set checkpoint_root_dir to a folder you can write in") if translation
                     else ("tune()'s run folder", "call tune() from a folder you can write in"))))
    return run_dir.root


def split_auxiliary_models(models: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """tune()'s `auxiliary_models=`: a `TunerModelConfig` (ours or agentscope.tuner's, duck-typed) becomes an
    `astuner.auxiliary_models` entry, which every backbone serves and the run's config.yaml records; an AgentScope
    chat model (e.g. `OpenAIChatModel` on any OpenAI-compatible endpoint) is used as it is, in this process.
    Returns (entries by name, chat models by name)."""
    served: dict[str, Any] = {}
    in_process: dict[str, Any] = {}
    for name, entry in (models or {}).items():
        # agentscope.tuner's (pydantic) too, under either of its names: the same fields
        if type(entry).__name__ in ("TunerModelConfig", "TunerChatModel"):
            if not getattr(entry, "model_path", None):
                raise TypeError(f"auxiliary model {name!r}: its TunerModelConfig names no model_path")
            defaults = TunerModelConfig(model_path="", max_model_len=0)
            fields = {f: getattr(entry, f, getattr(defaults, f)) for f in
                      ("temperature", "top_p", "max_tokens", "max_model_len", "enable_thinking")}
            thinking = fields.pop("enable_thinking")
            path = Path(str(entry.model_path)).expanduser()  # a folder here: recorded absolute; a hub id as given
            served[name] = {"path": str(path.absolute()) if path.exists() else str(entry.model_path), **fields,
                            **({} if thinking is None else {"enable_thinking": thinking})}
        elif callable(entry):
            in_process[name] = entry
        else:
            raise TypeError(f"auxiliary model {name!r} must be an AgentScope chat model or a TunerModelConfig, "
                            f"got {type(entry).__name__}")
    return served, in_process
