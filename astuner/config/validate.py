"""Check the composed `astuner:` tree against the schema and turn it into typed dataclasses.

Every problem becomes one line: where (file:line or the override), which key, what was wrong, how to fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from typing import Any, Union

from astuner.algorithm.advantages import ESTIMATORS
from astuner.algorithm.losses import AGG_MODES, KL_TYPES
from astuner.config.schema import (DEVICES, ENGINES, MADNESS_CHECKS, OPERATORS, SELECTORS, TASK_READER_TYPES,
                                   TINY_TOKENIZERS, AstunerConfig)
from astuner.config.source_map import SourceMap
from astuner.errors import ConfigError
from astuner.precision import DTYPES

_NoneType = type(None)


def _type_name(tp: Any) -> str:
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    origin = typing.get_origin(tp)
    if origin is Union:
        args = [a for a in typing.get_args(tp) if a is not _NoneType]
        return " or ".join(_type_name(a) for a in args) + " or null"
    if origin is list:
        item = _type_name(typing.get_args(tp)[0]).split(" ", 1)[1]
        return f"a list of {item}s"
    if origin is dict:
        return "a mapping"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def all_leaf_paths(cls: type, prefix: str) -> list[str]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}.{f.name}"
        out.append(path)
        if dataclasses.is_dataclass(hints[f.name]):
            out.extend(all_leaf_paths(hints[f.name], path))
    return out


class _Builder:
    def __init__(self, src: SourceMap):
        self.src = src
        self.errors: list[str] = []

    def error(self, dotted: str, message: str) -> None:
        self.errors.append(f"{self.src.where(dotted)}: {message}")

    def build(self, cls: type, data: Mapping, path: str) -> Any:
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in names:
                self.unknown_key(str(key), names, path)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                ok, value = self.convert(hints[f.name], data[f.name], f"{path}.{f.name}")
                if ok:
                    kwargs[f.name] = value
        return cls(**kwargs)

    def unknown_key(self, key: str, names: list[str], path: str) -> None:
        dotted = f"{path}.{key}"
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        if close:
            hint = f"did you mean '{path}.{close[0]}'?"
        else:
            elsewhere = [p for p in all_leaf_paths(AstunerConfig, "astuner") if p.rsplit(".", 1)[1] == key]
            if elsewhere:
                hint = f"did you mean '{elsewhere[0]}'? ('{key}' belongs there)"
            else:
                hint = f"valid keys under {path}: {', '.join(names)}"
        self.error(dotted, f"unknown key '{dotted}'; {hint}")

    def convert(self, tp: Any, value: Any, path: str) -> tuple[bool, Any]:
        def bad() -> tuple[bool, Any]:
            self.error(path, f"{path} must be {_type_name(tp)}, got {value!r} ({type(value).__name__})")
            return False, None

        if tp is Any:
            return True, value
        origin = typing.get_origin(tp)
        if origin is Union:
            args = [a for a in typing.get_args(tp) if a is not _NoneType]
            if value is None:
                return True, None
            tp_inner = args[0]
            ok, out = self.convert(tp_inner, value, path)
            return ok, out
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, Mapping):
                return bad()
            before = len(self.errors)
            out = self.build(tp, value, path)
            return len(self.errors) == before, out
        if origin is list:
            if not isinstance(value, (list, tuple)):
                return bad()
            (item_tp,) = typing.get_args(tp)
            items = []
            ok_all = True
            for i, item in enumerate(value):
                ok, out = self.convert(item_tp, item, f"{path}[{i}]")
                ok_all &= ok
                items.append(out)
            return ok_all, items
        if origin is dict:
            return (True, dict(value)) if isinstance(value, Mapping) else bad()
        if tp is bool:
            return (True, value) if isinstance(value, bool) else bad()
        if tp is int:
            return (True, value) if isinstance(value, int) and not isinstance(value, bool) else bad()
        if tp is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True, float(value)
            return bad()
        if tp is str:
            return (True, value) if isinstance(value, str) else bad()
        raise TypeError(f"schema type {tp!r} at {path} is not supported by the validator")


def validate_astuner_tree(tree: Any, src: SourceMap) -> AstunerConfig:
    """Typed `AstunerConfig` from the composed `astuner:` mapping, or `ConfigError` listing every problem."""
    builder = _Builder(src)
    if not isinstance(tree, Mapping):
        raise ConfigError(f"{src.conf_path}: the top-level key 'astuner' must be a mapping, got {tree!r}")
    cfg = builder.build(AstunerConfig, tree, "astuner")
    if not builder.errors:
        _check_rules(cfg, builder)
    if builder.errors:
        raise ConfigError("\n".join(builder.errors))
    return cfg


def _check_rules(cfg: AstunerConfig, b: _Builder) -> None:
    """Cross-field and range rules; each message says how to fix the value."""

    def positive(path: str, value: int | float) -> None:
        if value <= 0:
            b.error(path, f"{path} must be positive, got {value}")

    def one_of(path: str, value: str, choices: tuple[str, ...]) -> None:
        if value not in choices:
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            b.error(path, f"{path} {value!r} is not valid; {hint}choose one of {', '.join(choices)}")

    def required(path: str, value: Any, how: str) -> None:
        if value in (None, ""):
            b.error(path, f"{path} is not set; {how}")

    if not cfg.project_name.strip():
        b.error("astuner.project_name", "astuner.project_name must not be empty")
    name = cfg.experiment_name
    if name is not None and (not name.strip() or "/" in name or "\\" in name or name in (".", "..")):
        b.error("astuner.experiment_name",
                f"astuner.experiment_name {name!r} is not a folder name; use letters, digits, '.', '_' or '-'")

    tr = cfg.task_reader
    if tr.type not in TASK_READER_TYPES:
        close = difflib.get_close_matches(tr.type, TASK_READER_TYPES, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'? " if close else ""
        b.error("astuner.task_reader.type",
                f"astuner.task_reader.type {tr.type!r} is not a task reader; {hint}choose one of {', '.join(TASK_READER_TYPES)}")
    elif tr.type == "huggingface_dat_repo":
        required("astuner.task_reader.huggingface_dat_repo.dataset_path", tr.huggingface_dat_repo.dataset_path,
                 "set it to a hub id (openai/gsm8k) or a local dataset folder or file")
    elif tr.type == "dataset_file":
        required("astuner.task_reader.dataset_file.training.file_path", tr.dataset_file.training.file_path,
                 "set it to a JSON-lines file of training tasks")
    elif tr.type == "env_service":
        es = tr.env_service
        required("astuner.task_reader.env_service.env_url", es.env_url,
                 "set it to the service's base URL, e.g. http://127.0.0.1:8080")
        required("astuner.task_reader.env_service.env_type", es.env_type, "set it to the environment type to run")
        if es.env_url and not es.env_url.startswith(("http://", "https://")):
            b.error("astuner.task_reader.env_service.env_url",
                    f"astuner.task_reader.env_service.env_url {es.env_url!r} must start with http:// or https://")
        positive("astuner.task_reader.env_service.timeout_s", es.timeout_s)
        if es.retries < 0:
            b.error("astuner.task_reader.env_service.retries",
                    f"astuner.task_reader.env_service.retries must be >= 0, got {es.retries}")
        if es.retry_backoff_s < 0:
            b.error("astuner.task_reader.env_service.retry_backoff_s",
                    f"astuner.task_reader.env_service.retry_backoff_s must be >= 0, got {es.retry_backoff_s}")

    for key in ("train_batch_size", "max_prompt_length", "max_response_length"):
        positive(f"astuner.data.{key}", getattr(cfg.data, key))
    required("astuner.model.path", cfg.model.path, "set it to a hub id or a local model folder")

    ro = cfg.rollout
    required("astuner.rollout.agentscope_workflow", ro.agentscope_workflow,
             "name your workflow as 'package.module->Class' or 'path/to/file.py->Class'")
    for key in ("max_env_worker", "num_repeat", "tensor_model_parallel_size", "max_num_seqs",
                "max_response_length_in_one_turn", "max_model_len"):
        positive(f"astuner.rollout.{key}", getattr(ro, key))
    positive("astuner.rollout.multi_turn.max_sample_per_task", ro.multi_turn.max_sample_per_task)
    positive("astuner.rollout.val_kwargs.num_repeat", ro.val_kwargs.num_repeat)
    for prefix, temperature, top_p in (("astuner.rollout", ro.temperature, ro.top_p),
                                       ("astuner.rollout.val_kwargs", ro.val_kwargs.temperature, ro.val_kwargs.top_p)):
        if temperature < 0:
            b.error(f"{prefix}.temperature", f"{prefix}.temperature must be >= 0 (0 = greedy), got {temperature}")
        if not 0 < top_p <= 1:
            b.error(f"{prefix}.top_p", f"{prefix}.top_p must be in (0, 1], got {top_p}")
    for i, check in enumerate(ro.compute_madness_checklist):
        if check not in MADNESS_CHECKS:
            b.error(f"astuner.rollout.compute_madness_checklist[{i}]",
                    f"unknown madness check {check!r} in astuner.rollout.compute_madness_checklist; "
                    f"known checks: {', '.join(MADNESS_CHECKS)}")

    one_of("astuner.rollout.engine", ro.engine, ENGINES)
    from astuner.tuner.tool_parser import ALIASES, PARSER_CHOICES, REASONING_ALIASES, REASONING_CHOICES

    one_of("astuner.rollout.tool_call_parser", ro.tool_call_parser, PARSER_CHOICES + tuple(ALIASES))
    one_of("astuner.rollout.reasoning_parser", ro.reasoning_parser, REASONING_CHOICES + tuple(REASONING_ALIASES))
    if ro.engine == "openai":
        required("astuner.rollout.openai_base_url", ro.openai_base_url,
                 "set it to the server's base URL, e.g. http://127.0.0.1:8000/v1")
    if not 0 < ro.gpu_memory_utilization <= 1:
        b.error("astuner.rollout.gpu_memory_utilization",
                f"astuner.rollout.gpu_memory_utilization must be in (0, 1], got {ro.gpu_memory_utilization}")
    if ro.batch_wait_ms < 0:
        b.error("astuner.rollout.batch_wait_ms", f"astuner.rollout.batch_wait_ms must be >= 0, got {ro.batch_wait_ms}")
    if ro.episode_timeout_s is not None:
        positive("astuner.rollout.episode_timeout_s", ro.episode_timeout_s)
    if not 0 <= ro.max_error_rate <= 1:
        b.error("astuner.rollout.max_error_rate",
                f"astuner.rollout.max_error_rate must be a fraction in [0, 1], got {ro.max_error_rate}")
    positive("astuner.task_judge.llm_judge.timeout_s", cfg.task_judge.llm_judge.timeout_s)

    d = cfg.data
    if not b.errors and d.max_prompt_length + d.max_response_length > ro.max_model_len:
        total = d.max_prompt_length + d.max_response_length
        b.error("astuner.data.max_response_length",
                f"astuner.data.max_prompt_length ({d.max_prompt_length}) + astuner.data.max_response_length "
                f"({d.max_response_length}) = {total} exceeds astuner.rollout.max_model_len ({ro.max_model_len}); "
                f"raise astuner.rollout.max_model_len to at least {total} or lower the two lengths")
    if not b.errors and ro.max_response_length_in_one_turn >= ro.max_model_len:
        b.error("astuner.rollout.max_response_length_in_one_turn",
                f"astuner.rollout.max_response_length_in_one_turn ({ro.max_response_length_in_one_turn}) leaves no "
                f"room for a prompt in astuner.rollout.max_model_len ({ro.max_model_len}); make it smaller")

    tc = cfg.trainer_common
    for key in ("save_freq", "test_freq"):
        value = getattr(tc, key)
        if value == 0 or value < -1:
            b.error(f"astuner.trainer_common.{key}",
                    f"astuner.trainer_common.{key} must be a positive number of steps or -1, got {value}")
    positive("astuner.trainer_common.total_epochs", tc.total_epochs)
    if tc.total_training_steps is not None:
        positive("astuner.trainer_common.total_training_steps", tc.total_training_steps)
    for key in ("ppo_epochs", "mini_batch_num", "max_token_len_per_micro_batch", "nnodes"):
        positive(f"astuner.trainer_common.{key}", getattr(tc, key))
    gpus = tc.n_gpus_per_node
    if gpus != "auto" and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus <= 0):
        b.error("astuner.trainer_common.n_gpus_per_node",
                f"astuner.trainer_common.n_gpus_per_node must be a positive integer or auto, got {gpus!r}")
    from astuner.records.monitors import LOGGERS

    for i, name in enumerate(tc.logger):
        one_of(f"astuner.trainer_common.logger[{i}]", name, LOGGERS)
    if tc.trajectories_per_step < 0:
        b.error("astuner.trainer_common.trajectories_per_step", "astuner.trainer_common.trajectories_per_step must be >= 0")
    if tc.max_checkpoints_to_keep is not None:
        positive("astuner.trainer_common.max_checkpoints_to_keep", tc.max_checkpoints_to_keep)
    one_of("astuner.trainer_common.device", tc.device, DEVICES)
    one_of("astuner.trainer_common.dtype", tc.dtype, DTYPES)
    positive("astuner.trainer_common.optim.lr", tc.optim.lr)
    if tc.optim.warmup_steps < 0:
        b.error("astuner.trainer_common.optim.warmup_steps", "astuner.trainer_common.optim.warmup_steps must be >= 0")
    if len(tc.optim.betas) != 2 or not all(0 <= x < 1 for x in tc.optim.betas):
        b.error("astuner.trainer_common.optim.betas", f"astuner.trainer_common.optim.betas must be two numbers in "
                f"[0, 1), got {tc.optim.betas}")
    if tc.optim.grad_clip is not None:
        positive("astuner.trainer_common.optim.grad_clip", tc.optim.grad_clip)
    sft = tc.sft
    if sft.steps < 0:
        b.error("astuner.trainer_common.sft.steps", f"astuner.trainer_common.sft.steps must be >= 0, got {sft.steps}")
    for key in ("lr", "batch_size", "demonstrations_per_task"):
        positive(f"astuner.trainer_common.sft.{key}", getattr(sft, key))
    if sft.steps > 0 and not sft.expert:
        b.error("astuner.trainer_common.sft.expert", "astuner.trainer_common.sft.steps > 0 needs an expert "
                "('file.py->fn', an async function (prompt) -> reply) to play the demonstrations")
    al = tc.algorithm
    one_of("astuner.trainer_common.algorithm.adv_estimator", al.adv_estimator, ESTIMATORS)
    one_of("astuner.trainer_common.algorithm.kl_loss_type", al.kl_loss_type, KL_TYPES)
    one_of("astuner.trainer_common.algorithm.loss_agg_mode", al.loss_agg_mode, AGG_MODES)
    for key in ("clip_ratio_low", "clip_ratio_high"):
        positive(f"astuner.trainer_common.algorithm.{key}", getattr(al, key))
    if not al.clip_ratio_c > 1.0:  # verl and Trinity assert it
        raise ConfigError(f"astuner.trainer_common.algorithm.clip_ratio_c must be above 1 (dual-clip PPO's bound "
                          f"for negative advantages), got {al.clip_ratio_c}")
    if cfg.task_reader.data_selector is not None:  # Trinity's newer name wins
        cfg.task_reader.task_selector = cfg.task_reader.data_selector
        cfg.task_reader.data_selector = None
    sel = cfg.task_reader.task_selector
    one_of("astuner.task_reader.task_selector.selector_type", sel.selector_type, SELECTORS)
    if sel.selector_type == "difficulty_based" and len(sel.feature_keys) != 2:
        b.error("astuner.task_reader.task_selector.feature_keys",
                "difficulty_based needs exactly two feature_keys: the pass-rate columns of a weaker and of a "
                f"stronger reference model, got {sel.feature_keys}")
    if sel.selector_type == "offline_easy2hard" and not sel.feature_keys:
        b.error("astuner.task_reader.task_selector.feature_keys",
                "offline_easy2hard needs feature_keys: the columns to sort by (higher = easier)")
    for i, op in enumerate(cfg.data_processor.experience_pipeline.operators):
        one_of(f"astuner.data_processor.experience_pipeline.operators[{i}].name", op.name, OPERATORS)
    if cfg.model.lora is not None:
        lo = cfg.model.lora
        positive("astuner.model.lora.rank", lo.rank)
        positive("astuner.model.lora.alpha", lo.alpha)
        if not 0.0 <= lo.dropout < 1.0:
            b.error("astuner.model.lora.dropout", f"astuner.model.lora.dropout must be in [0, 1), got {lo.dropout}")
        tm = lo.target_modules
        if not (tm == "all-linear" or (isinstance(tm, list) and tm and all(isinstance(m, str) and m for m in tm))):
            b.error("astuner.model.lora.target_modules", f"astuner.model.lora.target_modules must be 'all-linear' or a "
                    f"list of module names such as [q_proj, v_proj], got {tm!r}")
    if cfg.model.tiny is not None:
        one_of("astuner.model.tiny.tokenizer", cfg.model.tiny.tokenizer, TINY_TOKENIZERS)
        positive("astuner.model.tiny.hidden_size", cfg.model.tiny.hidden_size)
        positive("astuner.model.tiny.layers", cfg.model.tiny.layers)
        positive("astuner.model.tiny.heads", cfg.model.tiny.heads)
        if cfg.model.tiny.hidden_size % cfg.model.tiny.heads:
            b.error("astuner.model.tiny.heads", f"astuner.model.tiny.hidden_size ({cfg.model.tiny.hidden_size}) must be "
                    f"a multiple of astuner.model.tiny.heads ({cfg.model.tiny.heads})")
    positive("astuner.trainer_common.trinity_only__n_vllm_engine", tc.trinity_only__n_vllm_engine)
