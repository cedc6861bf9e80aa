"""Composition: the seed YAML from any directory, layer order, overrides, defaults files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from astuner.config import load_run_config
from astuner.config.compose import DEFAULT_CONFIG_DIRS, compose_config
from astuner.config.source_map import yaml_line_map
from tests.conftest import REPO_ROOT, SEED_YAML, write_seed


def test_seed_yaml_from_another_directory(seed):
    run = load_run_config(seed.yaml_path, [])
    a = run.astuner
    assert a.project_name == "math_agent"
    assert a.rollout.temperature == 0.7 and a.rollout.max_num_seqs == 40
    assert a.rollout.compute_madness_checklist == ["nonsense", "wrong_toolcall"]
    assert a.trainer_common.trinity_only__n_vllm_engine == 2
    assert a.rollout.top_p == 1.0  # from astuner_default
    assert run.merged["trinity"]["trainer"]["max_token_len_per_gpu"] == 13000
    assert run.experiment_name == "math_agent"  # the YAML's stem


def test_seed_yaml_from_repo_root_uses_checkout_defaults(tmp_path, monkeypatch):
    project = write_seed(tmp_path)
    monkeypatch.chdir(REPO_ROOT)
    composed = compose_config(project.yaml_path, [])
    assert composed.searchpath[0] == f"file://{REPO_ROOT / 'astuner' / 'default_config'}"
    assert composed.merged["astuner"]["rollout"]["num_repeat"] == 4


def test_file_searchpath_prefers_cwd_copy(tmp_path, monkeypatch):
    """A `file://astuner/default_config` folder in the cwd wins over the installed package."""
    project = write_seed(tmp_path / "p")
    local = tmp_path / "p" / "astuner" / "default_config"
    shutil.copytree(DEFAULT_CONFIG_DIRS[0], local)
    text = (local / "astuner_default.yaml").read_text().replace("top_p: 1.0", "top_p: 0.5", 1)
    (local / "astuner_default.yaml").write_text(text)
    monkeypatch.chdir(tmp_path / "p")
    assert load_run_config(project.yaml_path).astuner.rollout.top_p == 0.5


def test_user_yaml_without_hydra_or_defaults_gets_all_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "plain.yaml"
    conf.write_text("astuner:\n  model: {path: m}\n  rollout: {agentscope_workflow: 'a->B'}\n"
                    "  task_reader: {huggingface_dat_repo: {dataset_path: d}}\n")
    run = load_run_config(conf)
    assert run.astuner.rollout.num_repeat == 4
    assert run.merged["trinity"] == {"trainer": {}}
    assert run.experiment_name == "plain"


def test_pkg_searchpath(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = SEED_YAML.replace("file://astuner/default_config/verl", "pkg://astuner/default_config/verl") \
                    .replace("file://astuner/default_config/trinity", "pkg://astuner.default_config.trinity") \
                    .replace("file://astuner/default_config\n", "pkg://astuner/default_config\n")
    project = write_seed(tmp_path, text)
    assert "pkg://" in project.yaml_path.read_text()
    assert load_run_config(project.yaml_path).astuner.rollout.max_num_seqs == 40


def test_layer_order_verl_trinity_astuner_user_cli(tmp_path, monkeypatch):
    """verl_default < trinity_default < astuner_default < user file < overrides."""
    monkeypatch.chdir(tmp_path)
    layers = tmp_path / "layers"
    layers.mkdir()
    (layers / "verl_default.yaml").write_text("probe: {a: verl, b: verl, c: verl, d: verl}\n")
    (layers / "trinity_default.yaml").write_text("probe: {b: trinity, c: trinity, d: trinity}\n")
    shutil.copy(DEFAULT_CONFIG_DIRS[0] / "astuner_default.yaml", layers / "astuner_default.yaml")
    with open(layers / "astuner_default.yaml", "a") as fh:
        fh.write("probe: {c: astuner, d: astuner}\n")
    conf = tmp_path / "exp.yaml"
    conf.write_text(SEED_YAML.split("trinity:\n")[0].replace("math_agent.math_agent->", "x->")
                    + f"probe: {{d: user, e: user}}\nhydra: {{searchpath: ['file://{layers}']}}\n"
                    + "defaults: [verl_default, trinity_default, astuner_default, _self_]\n")
    merged = compose_config(conf, ["probe.e=cli"]).merged
    assert merged["probe"] == {"a": "verl", "b": "trinity", "c": "astuner", "d": "user", "e": "cli"}
    assert merged["astuner"]["rollout"]["temperature"] == 0.7


def test_overrides_set_add_and_delete(seed):
    run = load_run_config(seed.yaml_path, ["astuner.rollout.num_repeat=8", "+trinity.buffer.batch_size=16",
                                           "~trinity.trainer", "astuner.experiment_name=exp2"])
    assert run.astuner.rollout.num_repeat == 8
    assert run.merged["trinity"] == {"buffer": {"batch_size": 16}}
    assert run.experiment_name == "exp2"


def test_interpolations_are_resolved(seed):
    text = seed.yaml_path.read_text().replace("project_name: math_agent", "project_name: ${oc.env:PROJ,fallback}")
    seed.yaml_path.write_text(text)
    assert load_run_config(seed.yaml_path).astuner.project_name == "fallback"


def test_keys_that_follow_one_key_take_its_value_and_its_one_error(seed):
    """The main job's YAML derives its seeds from trainer_common.seed: a bad value set there is one error, where
    it was set, not one per key that follows it."""
    from astuner.errors import ConfigError

    text = seed.yaml_path.read_text().replace(
        "  rollout:\n", "  rollout:\n    seed: ${astuner.trainer_common.seed}\n", 1).replace(
        "  task_reader:\n", "  task_reader:\n    task_selector: {seed: '${astuner.trainer_common.seed}'}\n", 1)
    seed.yaml_path.write_text(text)
    run = load_run_config(seed.yaml_path, ["astuner.trainer_common.seed=5"])
    assert run.astuner.rollout.seed == 5 and run.astuner.task_reader.task_selector.seed == 5
    with pytest.raises(ConfigError) as caught:
        load_run_config(seed.yaml_path, ["astuner.trainer_common.seed=abc"])
    assert str(caught.value).splitlines() == [
        "command-line override 'astuner.trainer_common.seed=abc': astuner.trainer_common.seed must be an integer, "
        "got 'abc' (str)"]
    seed.yaml_path.write_text(text.replace("    seed: ${astuner.trainer_common.seed}", "    seed: x"))
    with pytest.raises(ConfigError) as caught:  # a key's own bad value is still its own error
        load_run_config(seed.yaml_path, ["astuner.trainer_common.seed=abc"])
    assert len(str(caught.value).splitlines()) == 2 and "astuner.rollout.seed must be an integer" in str(caught.value)


@pytest.mark.parametrize("path", [DEFAULT_CONFIG_DIRS[0] / "astuner_default.yaml",
                                  DEFAULT_CONFIG_DIRS[2] / "trinity_default.yaml"])
def test_every_default_key_has_a_comment_above_it(path: Path):
    lines = path.read_text().splitlines()
    for key, lineno in yaml_line_map(path).items():
        above = lines[lineno - 2].strip() if lineno >= 2 else ""
        assert above.startswith("#"), f"{path.name}:{lineno} key {key} has no comment above it"


def test_data_selector_and_top_level_data_processor_are_accepted(seed):
    text = seed.yaml_path.read_text().replace("trinity:\n", "data_processor:\n  experience_pipeline:\n"
                                              "    operators: [{name: pass_rate_calculator}]\ntrinity:\n", 1)
    seed.yaml_path.write_text(text)
    run = load_run_config(seed.yaml_path, ["+astuner.task_reader.data_selector={selector_type: difficulty_based, "
                                           "feature_keys: [weak, strong], kwargs: {tau: 0}}"])
    sel = run.astuner.task_reader.selector  # data_selector, Trinity's newer name, is the one in effect
    assert (sel.selector_type, sel.feature_keys, sel.kwargs) == ("difficulty_based", ["weak", "strong"], {"tau": 0})
    assert [op.name for op in run.astuner.data_processor.experience_pipeline.operators] == ["pass_rate_calculator"]
    assert "data_processor" not in run.merged  # moved under astuner
