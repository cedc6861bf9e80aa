"""Check the composed `astuner:` tree against the declared schema and turn it into typed dataclasses.

Each key is checked against its declaration (`schema.py`: type, allowed values, bounds, rule, required); the
rules below involve several keys. Every problem is collected, then all are reported, one line each: where
(file:line or the override), which key, what was wrong, how to fix. Nothing is changed while checking.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from typing import Any, Union

from astuner.config.keys import declared, spec_of
from astuner.config.schema import AstunerConfig
from astuner.config.source_map import SourceMap
from astuner.errors import ConfigError, ConfigProblems

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
    return [item.path for item in declared(cls, prefix)]


def nearest_key(dotted: str) -> str:
    """'did you mean ...?' for an unknown astuner key (from the YAML or the command line), or '': a key of its
    section by a close name, else a key of the same name in another section, else (its section unknown too) the
    closest whole path."""
    paths = all_leaf_paths(AstunerConfig, "astuner")
    parent, _, name = dotted.rpartition(".")
    siblings = {p.rpartition(".")[2]: p for p in paths if p.rpartition(".")[0] == parent}
    close = difflib.get_close_matches(name, list(siblings), n=1, cutoff=0.6)
    if close:
        return f"did you mean '{siblings[close[0]]}'?"
    elsewhere = [p for p in paths if p.rpartition(".")[2] == name]
    if elsewhere:
        return f"did you mean '{elsewhere[0]}'? ('{name}' belongs there)"
    close = [] if siblings else difflib.get_close_matches(dotted, paths, n=1, cutoff=0.8)
    return f"did you mean '{close[0]}'?" if close else ""


class _Builder:
    def __init__(self, src: SourceMap):
        self.src = src
        self.errors: list[str] = []
        self.error_keys: list[str] = []  # the key of each error
        self.bad: set[str] = set()  # keys with a problem: rules over several keys skip them

    def error(self, dotted: str, message: str) -> None:
        self.errors.append(f"{self.src.where(dotted)}: {message}")
        self.error_keys.append(dotted.split("[", 1)[0])
        self.bad.add(dotted.split("[", 1)[0])

    def build(self, cls: type, data: Mapping, path: str) -> Any:
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in names:
                self.unknown_key(str(key), names, path)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                key = f"{path}.{f.name}"
                ok, value = self.convert(hints[f.name], data[f.name], key)
                if ok and self.declared_ok(spec_of(f), key, value):
                    kwargs[f.name] = value
        return cls(**kwargs)

    def declared_ok(self, spec: Any, key: str, value: Any) -> bool:
        """The declaration's checks of one given value: allowed values (each item of a list), bounds, rule."""
        problems = [(key, spec.problem(key, value))]
        if spec.choices and isinstance(value, list):
            problems += [(f"{key}[{i}]", spec.choice_problem(f"{key}[{i}]", item)) for i, item in enumerate(value)]
        for where, problem in problems:
            if problem:
                self.error(where, problem)
        return not any(problem for _, problem in problems)

    def unknown_key(self, key: str, names: list[str], path: str) -> None:
        dotted = f"{path}.{key}"
        hint = nearest_key(dotted) or f"valid keys under {path}: {', '.join(names)}"
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
            return True, self.build(tp, value, path)  # its keys' problems are recorded; the others stand
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
            if not isinstance(value, Mapping):
                return bad()
            item_tp = (typing.get_args(tp) or (str, Any))[1]
            if not dataclasses.is_dataclass(item_tp):
                return True, dict(value)
            # name -> entry (a string is its `path`): each entry is a section of its own
            entries = {}
            for name, entry in value.items():
                where = f"{path}.{name}"
                entry = {"path": entry} if isinstance(entry, str) else entry
                if not isinstance(entry, Mapping):
                    self.error(where, f"{where} must be a model folder or a mapping, got {entry!r}")
                    continue
                if getattr(item_tp, "path_required", True) and not entry.get("path"):
                    self.error(where, f"{where}.path is not set; name the model folder")
                entries[str(name)] = self.build(item_tp, entry, where)
            return True, entries
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
    cfg, problems, _ = check_astuner_tree(tree, src)
    if problems:
        raise ConfigError(problems[0]) if len(problems) == 1 else ConfigProblems(problems)
    return cfg


def check_astuner_tree(tree: Any, src: SourceMap) -> tuple[AstunerConfig, list[str], set[str]]:
    """The typed config (a refused value left at its default), every problem (one line each) and the keys refused
    (the checks that follow skip what reads them). `ConfigError` when the tree is no mapping at all."""
    builder = _Builder(src)
    if not isinstance(tree, Mapping):
        raise ConfigError(f"{src.conf_path}: the top-level key 'astuner' must be a mapping, got {tree!r}")
    cfg = builder.build(AstunerConfig, tree, "astuner")
    _check_required(cfg, builder)
    _check_rules(cfg, builder)
    # a key whose value is `${other}` repeats other's error: said once, where other was set
    taken = src.interpolations
    problems = [error for error, key in zip(builder.errors, builder.error_keys) if taken.get(key) not in builder.bad]
    return cfg, problems, set(builder.bad)


def _value(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split(".")[1:]:
        node = getattr(node, part, None)
    return node


def _check_required(cfg: AstunerConfig, b: _Builder) -> None:
    for item in declared(AstunerConfig):
        if item.spec.required and item.path not in b.bad and _value(cfg, item.path) in (None, ""):
            b.error(item.path, f"{item.path} is not set; {item.spec.required}")


def _check_rules(cfg: AstunerConfig, b: _Builder) -> None:
    """Rules over several keys; each skips when one of its keys already has a problem, and says how to fix."""

    def ok(*paths: str) -> bool:
        return not any(p in b.bad for p in paths)

    def required(path: str, value: Any, how: str) -> None:
        if value in (None, "") and ok(path):
            b.error(path, f"{path} is not set; {how}")

    tr = cfg.task_reader
    if not ok("astuner.task_reader.type"):  # a refused type is left at its default: its keys are not the user's
        pass
    elif tr.type == "huggingface_dat_repo":
        required("astuner.task_reader.huggingface_dat_repo.dataset_path", tr.huggingface_dat_repo.dataset_path,
                 "set it to a hub id (openai/gsm8k) or a local dataset folder or file")
    elif tr.type == "dataset_file":
        required("astuner.task_reader.dataset_file.training.file_path", tr.dataset_file.training.file_path,
                 "set it to a JSON-lines file of training tasks")
    elif tr.type == "env_service":
        required("astuner.task_reader.env_service.env_url", tr.env_service.env_url,
                 "set it to the service's base URL, e.g. http://127.0.0.1:8080")
        required("astuner.task_reader.env_service.env_type", tr.env_service.env_type,
                 "set it to the environment type to run")
    ro = cfg.rollout
    if ro.engine == "openai":
        required("astuner.rollout.openai_base_url", ro.openai_base_url,
                 "set it to the server's base URL, e.g. http://127.0.0.1:8000/v1")

    d = cfg.data
    lengths = ("astuner.data.max_prompt_length", "astuner.data.max_response_length", "astuner.rollout.max_model_len")
    if ok(*lengths) and d.max_prompt_length + d.max_response_length > ro.max_model_len:
        total = d.max_prompt_length + d.max_response_length
        b.error("astuner.data.max_response_length",
                f"astuner.data.max_prompt_length ({d.max_prompt_length}) + astuner.data.max_response_length "
                f"({d.max_response_length}) = {total} exceeds astuner.rollout.max_model_len ({ro.max_model_len}); "
                f"raise astuner.rollout.max_model_len to at least {total} or lower the two lengths")
    if ok("astuner.rollout.max_response_length_in_one_turn", "astuner.rollout.max_model_len") and \
            ro.max_response_length_in_one_turn >= ro.max_model_len:
        b.error("astuner.rollout.max_response_length_in_one_turn",
                f"astuner.rollout.max_response_length_in_one_turn ({ro.max_response_length_in_one_turn}) leaves no "
                f"room for a prompt in astuner.rollout.max_model_len ({ro.max_model_len}); make it smaller")

    sft = cfg.trainer_common.sft
    if ok("astuner.trainer_common.sft.steps") and sft.steps > 0 and not sft.expert:
        b.error("astuner.trainer_common.sft.expert", "astuner.trainer_common.sft.steps > 0 needs an expert "
                "('file.py->fn', an async function (prompt) -> reply) to play the demonstrations")
    traces = cfg.trainer_common.traces
    if ok("astuner.trainer_common.traces.store") and traces.store and cfg.policies:
        b.error("astuner.trainer_common.traces.store", "astuner.trainer_common.traces trains the one policy of a run; "
                "this config has several (astuner.policies): train from the store with a config of one policy")
    for name, neutral in (("min_reward", None), ("best_per_task", False)):  # sft's choice of episodes
        if ok(f"astuner.trainer_common.traces.{name}") and traces.mode == "pg" and getattr(traces, name) != neutral:
            b.error(f"astuner.trainer_common.traces.{name}", f"chooses the episodes sft trains on; traces.mode pg "
                    f"learns from every rewarded episode against its batch's mean reward, which this would not "
                    f"change: remove it, or use traces.mode sft")
    off = cfg.trainer_common.off_policy
    if ok(*(f"astuner.trainer_common.off_policy.{k}" for k in ("max_staleness", "sync_interval", "sync_offset"))):
        from astuner.config.sync_schedule import problem

        contradiction = problem(off)
        if contradiction:
            b.error(*contradiction)
        steps = cfg.trainer_common.total_training_steps
        bound = off.max_staleness
        if not contradiction and steps is not None and bound is not None and steps >= 1 and bound > steps:
            b.error("astuner.trainer_common.off_policy.max_staleness",
                    f"astuner.trainer_common.off_policy.max_staleness {bound} is beyond the run's {steps} steps (a "
                    f"step's samples lag at most {steps - 1} versions); at most {steps}")
    sel = tr.selector
    where = f"astuner.task_reader.{'task' if tr.data_selector is None else 'data'}_selector.feature_keys"
    if sel.selector_type == "difficulty_based" and len(sel.feature_keys) != 2:
        b.error(where,
                "difficulty_based needs exactly two feature_keys: the pass-rate columns of a weaker and of a "
                f"stronger reference model, got {sel.feature_keys}")
    if sel.selector_type == "offline_easy2hard" and not sel.feature_keys:
        b.error(where,
                "offline_easy2hard needs feature_keys: the columns to sort by (higher = easier)")
    if ok("astuner.policies", "astuner.rollout.agent_policy"):
        from astuner.config.agent_policy import agent_policy_problems

        for where, problem in agent_policy_problems(cfg.policies, ro.agent_policy):
            b.error(where, problem)
        if cfg.policies and ro.trainable_targets is not None and ok("astuner.rollout.trainable_targets"):
            b.error("astuner.rollout.trainable_targets", "astuner.rollout.trainable_targets and astuner.policies "
                    "both say which agents learn; with policies, map agents in astuner.rollout.agent_policy (an "
                    "agent matched by no entry is not trained) and remove trainable_targets")
    if ok("astuner.auxiliary_models"):
        for name, entry in cfg.auxiliary_models.items():
            where = f"astuner.auxiliary_models.{name}"
            if entry.base_url and entry.path:
                b.error(where, f"{where} names both a folder (path) and an endpoint (base_url); keep one")
            elif entry.base_url and not entry.model:
                b.error(f"{where}.model", f"{where}.model is not set; name the model at {entry.base_url}")
            elif not entry.base_url and not entry.path:
                b.error(where, f"{where} names no model; set path (a model folder) or base_url and model (an "
                        f"OpenAI-compatible endpoint)")
    llm = cfg.task_judge.llm_judge
    if llm.auxiliary_model is not None and ok("astuner.task_judge.llm_judge.auxiliary_model", "astuner.auxiliary_models"):
        if llm.auxiliary_model not in cfg.auxiliary_models:
            names = ", ".join(cfg.auxiliary_models) or "none is declared"
            b.error("astuner.task_judge.llm_judge.auxiliary_model",
                    f"astuner.task_judge.llm_judge.auxiliary_model {llm.auxiliary_model!r} is no astuner.auxiliary_models "
                    f"entry ({names}); declare it there or name another")
        elif llm.base_url:
            b.error("astuner.task_judge.llm_judge.base_url", "astuner.task_judge.llm_judge names both an auxiliary "
                    "model and an endpoint (base_url); keep one")
    tiny = cfg.model.tiny
    if tiny is not None and ok("astuner.model.tiny.hidden_size", "astuner.model.tiny.heads") and \
            tiny.hidden_size % tiny.heads:
        b.error("astuner.model.tiny.heads", f"astuner.model.tiny.hidden_size ({tiny.hidden_size}) must be "
                f"a multiple of astuner.model.tiny.heads ({tiny.heads})")
