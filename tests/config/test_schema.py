"""The one declaration of the config keys (astuner/config/schema.py): the files generated from it are current, the
validator takes every single-key check from it and reports every problem at once, and the modules that implement
a key's allowed values implement exactly those."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from astuner.config.keys import declared
from astuner.config.reference import DEFAULT_YAML, default_yaml
from astuner.config.schema import AstunerConfig
from astuner.config.source_map import SourceMap
from astuner.config.validate import validate_astuner_tree
from astuner.errors import ConfigError

KEYS = [item for item in declared(AstunerConfig) if not item.is_section]
VALID = {"model": {"path": "m"}, "rollout": {"agentscope_workflow": "a.b->C"},
         "task_reader": {"huggingface_dat_repo": {"dataset_path": "d"}}}


def _validate(tree, folder=Path(__file__).parent / "data"):
    return validate_astuner_tree(tree, SourceMap(folder / "empty.yaml", []))


def _set(tree, dotted, value):
    node = tree
    parts = dotted.split(".")[1:]
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return tree


def test_default_yaml_is_generated_from_the_declaration():
    assert DEFAULT_YAML.read_text() == default_yaml(), \
        "stale: regenerate with python -m astuner.config.reference --write docs/configuration.md"
    assert yaml.safe_load(default_yaml())["astuner"] == dataclasses.asdict(AstunerConfig())


def test_every_key_is_declared_with_help_and_known_backbones():
    assert len(KEYS) > 100
    for item in KEYS:
        assert item.spec.help.strip(), item.path
        assert set(item.spec.backbones) <= {"debug", "verl", "trinity"}, item.path


def test_the_defaults_pass_every_declared_check():
    cfg = _validate(copy.deepcopy(VALID))
    assert cfg.rollout.num_repeat == 4 and cfg.model.path == "m"


def _outside(spec):
    """A value of the key's type that its declared bounds refuse."""
    if spec.gt is not None:
        return spec.gt
    if spec.ge is not None:
        return spec.ge - 1
    if spec.lt is not None:
        return spec.lt
    return spec.le + 1


def _valid_with_section_of(item):
    """A valid tree, with the optional section (model.lora, model.tiny) that holds `item` switched on."""
    tree = copy.deepcopy(VALID)
    section = item.path.rsplit(".", 1)[0]
    if section.endswith((".lora", ".tiny")):
        _set(tree, section, {})
    return tree


BOUNDED = [item for item in KEYS if {item.spec.gt, item.spec.ge, item.spec.lt, item.spec.le} != {None}]
CHOICES = [item for item in KEYS if item.spec.choices and not item.path.endswith(".name")]


@pytest.mark.parametrize("item", BOUNDED, ids=lambda item: item.path)
def test_each_declared_bound_is_enforced(item):
    tree = _valid_with_section_of(item)
    value = _outside(item.spec)
    value = float(value) if "float" in str(item.type) else int(value)
    with pytest.raises(ConfigError) as err:
        _validate(_set(tree, item.path, value))
    assert f"{item.path} must be {item.spec.bounds_text()}" in str(err.value)


@pytest.mark.parametrize("item", CHOICES, ids=lambda item: item.path)
def test_each_declared_choice_list_is_enforced(item):
    tree = _valid_with_section_of(item)
    bad = ["no_such_value"] if isinstance(item.default, list) else "no_such_value"
    with pytest.raises(ConfigError) as err:
        _validate(_set(tree, item.path, bad))
    assert "'no_such_value'" in str(err.value) and item.spec.choices[-1] in str(err.value)


def test_every_problem_is_reported_at_once_and_nothing_is_changed():
    tree = copy.deepcopy(VALID)
    _set(tree, "astuner.trainer_common.algorithm.clip_ratio_c", 0.5)  # once the validator stopped here
    _set(tree, "astuner.rollout.top_p", 2.0)
    _set(tree, "astuner.trainer_common.logger", ["console", "tensorbord"])
    _set(tree, "astuner.data.max_prompt_length", 0)
    del tree["model"]
    with pytest.raises(ConfigError) as err:
        _validate(tree)
    lines = str(err.value).splitlines()
    assert len(lines) == 5, lines
    text = str(err.value)
    assert "clip_ratio_c must be above 1 (dual-clip PPO's bound for negative advantages), got 0.5" in text
    assert "astuner.rollout.top_p must be in (0, 1], got 2.0" in text
    assert "logger[1] 'tensorbord' is not valid; did you mean 'tensorboard'?" in text
    assert "astuner.data.max_prompt_length must be positive, got 0" in text
    assert "astuner.model.path is not set" in text
    assert "exceeds astuner.rollout.max_model_len" not in text  # a rule over keys that already have a problem

    given = copy.deepcopy(VALID)
    _set(given, "astuner.task_reader.data_selector", {"selector_type": "random"})
    before = copy.deepcopy(given)
    cfg = _validate(given)
    assert given == before
    assert cfg.task_reader.data_selector.selector_type == "random" and cfg.task_reader.task_selector.selector_type \
        == "shuffle" and cfg.task_reader.selector is cfg.task_reader.data_selector


def test_implementations_offer_exactly_the_declared_choices():
    from astuner.config import schema
    from astuner.data.selector import SELECTORS
    from astuner.model.chat.tool_parser import FINDERS, VLLM_NAMES

    assert set(SELECTORS) == set(schema.SELECTORS)
    assert set(FINDERS) | {"gpt_oss"} == set(schema.TOOL_CALL_FORMATS) == set(VLLM_NAMES)  # gpt_oss: its own reader
    from astuner.backbone.trinity.translate import OPERATORS

    assert set(OPERATORS) < set(schema.OPERATORS)  # ours; reward_filter is Trinity's own


def test_every_declared_operator_runs():
    from astuner.config.schema import OPERATORS, OperatorConfig
    from astuner.data.operators import apply_operators

    for name in OPERATORS:
        apply_operators([OperatorConfig(name=name)], [], lambda rates: None)
    with pytest.raises(ValueError):
        apply_operators([OperatorConfig(name="unknown")], [], lambda rates: None)


def test_unread_keys_are_named_for_the_backbone(tmp_path):
    from astuner.config.keys import unread_by

    tree = copy.deepcopy(VALID)
    _set(tree, "astuner.rollout.engine", "hf")
    _set(tree, "astuner.rollout.num_repeat", 8)
    _set(tree, "astuner.rollout.seed", 7)
    cfg = _validate(tree)
    assert unread_by(cfg, "debug") == []
    assert unread_by(cfg, "verl") == ["astuner.rollout.engine", "astuner.rollout.seed"]
    assert unread_by(cfg, "trinity") == ["astuner.rollout.engine", "astuner.rollout.seed"]
