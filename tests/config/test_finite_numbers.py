"""nan and ±inf are no value of any number key. The keys are read from the declaration (config/schema.py), the
entries of name -> section mappings (auxiliary_models, policies) and tune()'s argument dataclasses included, so a
key declared later is covered without a line here."""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path
from typing import Any, Iterator

import pytest

from astuner.config.keys import declared, nested_dataclass
from astuner.config.schema import AstunerConfig
from astuner.config.source_map import SourceMap
from astuner.config.validate import validate_astuner_tree
from astuner.errors import ConfigError, UserError

NON_FINITE = [float("nan"), float("inf"), float("-inf")]
VALID = {"model": {"path": "m"}, "rollout": {"agentscope_workflow": "a.b->C"},
         "task_reader": {"huggingface_dat_repo": {"dataset_path": "d"}}}
# what an entry of a name -> section mapping needs besides the key under test
ENTRY = {"auxiliary_models": {"path": "m"}, "policies": {}}


def _numeric(tp: Any) -> bool:
    args = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) is typing.Union else [tp]
    inner = [typing.get_args(a)[0] if typing.get_origin(a) is list else a for a in args]
    return any(a in (int, float) for a in inner)


def number_keys() -> Iterator[str]:
    """Every declared key holding numbers (or a list of them), as a path in the tree: an entry of a mapping of
    sections is named `x`."""
    def walk(cls: type, prefix: str) -> Iterator[str]:
        for item in declared(cls, prefix):
            if _numeric(item.type):
                yield item.path
            if typing.get_origin(item.type) is dict:
                entry = typing.get_args(item.type)[1]
                if nested_dataclass(entry) is not None:
                    yield from walk(entry, f"{item.path}.x")

    yield from walk(AstunerConfig, "astuner")


KEYS = list(number_keys())


def _tree_setting(path: str, value: Any) -> dict[str, Any]:
    """A valid tree but for `path` = `value` (the optional sections and the mapping entry it lies in switched on)."""
    tree = copy.deepcopy(VALID)
    parts = path.split(".")[1:]
    node = tree
    for i, part in enumerate(parts[:-1]):
        if parts[i - 1:i] and parts[i - 1] in ENTRY and part == "x":
            node = node.setdefault(part, copy.deepcopy(ENTRY[parts[i - 1]]))
        else:
            node = node.setdefault(part, {})
    leaf_type = _leaf_type(path)
    node[parts[-1]] = [0.5, value] if typing.get_origin(leaf_type) is list else value
    return tree


def _leaf_type(path: str) -> Any:
    cls: Any = AstunerConfig
    parts = path.split(".")[1:]
    for i, part in enumerate(parts):
        if part == "x" and i and parts[i - 1] in ENTRY:
            continue
        tp = typing.get_type_hints(cls)[part]
        if i == len(parts) - 1:
            return tp
        cls = nested_dataclass(tp) or nested_dataclass(typing.get_args(tp)[1])


def _validate(tree: dict[str, Any]) -> Any:
    return validate_astuner_tree(tree, SourceMap(Path(__file__).parent / "data" / "empty.yaml", []))


def test_the_walk_finds_the_keys_of_every_kind():
    """Plain, optional-section, list and mapping-entry keys are all walked (the walk itself is not empty)."""
    for path in ("astuner.rollout.temperature", "astuner.model.lora.dropout", "astuner.trainer_common.optim.betas",
                 "astuner.auxiliary_models.x.top_p", "astuner.policies.x.optim.lr", "astuner.rollout.max_model_len",
                 "astuner.policies.x.tiny.hidden_size"):
        assert path in KEYS


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("path", KEYS)
def test_a_non_finite_number_is_refused_in_one_line_naming_the_key(path, value):
    with pytest.raises(ConfigError) as err:
        _validate(_tree_setting(path, value))
    message = str(err.value)
    assert len(message.splitlines()) == 1 and len(message) <= 300, message
    assert path in message and ("nan" in message or "inf" in message), message


def test_a_non_finite_float_is_said_to_need_a_finite_number_with_its_bounds():
    with pytest.raises(ConfigError) as err:
        _validate(_tree_setting("astuner.rollout.top_p", float("nan")))
    assert "astuner.rollout.top_p must be a finite number in (0, 1], got nan" in str(err.value)
    with pytest.raises(ConfigError) as err:
        _validate(_tree_setting("astuner.trainer_common.algorithm.kl_loss_coef", float("inf")))
    assert "kl_loss_coef must be a finite number, got inf" in str(err.value)  # unbounded keys too


# tune()'s arguments: each number field of its dataclasses sets a declared key (or several: max_tokens)
def _tune_number_fields() -> Iterator[tuple[str, str]]:
    from astuner import api

    for cls in (api.TunerModelConfig, api.AlgorithmConfig, api.DatasetConfig):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if _numeric(hints[f.name]):
                yield cls.__name__, f.name


TUNE_FIELDS = list(_tune_number_fields())


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("cls,name", TUNE_FIELDS, ids=[f"{c}.{n}" for c, n in TUNE_FIELDS])
def test_tune_refuses_a_non_finite_argument_naming_it(tmp_path, monkeypatch, cls, name, value):
    from astuner import api

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')

    async def workflow(task, model, auxiliary_models=None):
        return None

    args: dict[str, Any] = {
        "TunerModelConfig": {"model_path": "m", "max_model_len": 4096, "max_tokens": 16},
        "AlgorithmConfig": {}, "DatasetConfig": {"path": "tasks.jsonl"}}
    args[cls][name] = value
    with pytest.raises(UserError) as err:
        api.tune(workflow_func=workflow, model=api.TunerModelConfig(**args["TunerModelConfig"]),
                 algorithm=api.AlgorithmConfig(**args["AlgorithmConfig"]),
                 train_dataset=api.DatasetConfig(**args["DatasetConfig"]),
                 eval_dataset=api.DatasetConfig(path="tasks.jsonl"), experiment_name="x")
    message = str(err.value)
    assert f"{cls}.{name}" in message and len(message.splitlines()) == 1, message
    assert not (tmp_path / "checkpoints").exists()
