"""The warm start on a distributed backbone (`backbone/warm_start.py`): astuner's SFT run in the driver before
verl or Trinity starts, its weights saved whole in the run folder and handed on; a resume reuses a finished one;
an expert none of whose episodes is kept fails the run in one line. End to end (the backbones start from these
weights) in test_verl_e2e.py and test_trinity_e2e.py."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import REPO_ROOT

CONF = REPO_ROOT / "tutorial" / "example_tool_cpu" / "calc_agent.yaml"
EXPERT = "astuner.trainer_common.sft.expert='tutorial/example_tool_cpu/calc_agent.py->expert'"


def context(tmp_path, *overrides):
    from astuner.config import load_run_config
    from astuner.plugins import resolve_plugins

    sys.path.insert(0, str(CONF.parent))
    from warm_start import base_model

    if not (tmp_path / "model").exists():
        base_model(tmp_path / "model")
    run = load_run_config(CONF, [f"astuner.model.path={tmp_path / 'model'}", EXPERT, "astuner.trainer_common.device=cpu",
                                 *overrides])
    return SimpleNamespace(config=run, plugins=resolve_plugins(run), run_dir=SimpleNamespace(root=tmp_path / "run"))


def test_the_warm_start_saves_whole_weights_in_the_run_folder_and_a_resume_reuses_them(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from astuner.backbone.debug.warm_start import warm_start

    monkeypatch.chdir(REPO_ROOT)  # the expert's path is the repository's
    assert warm_start(context(tmp_path)) is None  # no sft.steps: nothing to do
    ctx = context(tmp_path, "astuner.trainer_common.sft.steps=4")
    out = warm_start(ctx)
    assert out == str(tmp_path / "run" / "warm_start" / "model")
    record = json.loads((tmp_path / "run" / "warm_start" / "warm_start.json").read_text())
    assert record["steps"] == 4 and record["demonstrations"] > 0 and record["kept_episodes"] == record["expert_episodes"]
    assert record["from"] == str(tmp_path / "model") and record["device"] == "cpu"
    assert not (tmp_path / "run" / "warm_start.partial").exists()
    trained = AutoModelForCausalLM.from_pretrained(out).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "model").state_dict()
    assert any(not (trained[k] == base[k]).all() for k in base)  # the weights moved
    assert (tmp_path / "run" / "warm_start" / "model" / "tokenizer_config.json").exists()
    stamp = (tmp_path / "run" / "warm_start" / "warm_start.json").stat().st_mtime_ns
    assert warm_start(ctx) == out  # resumed: reused, not trained again
    assert (tmp_path / "run" / "warm_start" / "warm_start.json").stat().st_mtime_ns == stamp


def test_an_expert_whose_every_episode_is_left_out_fails_in_one_line(tmp_path, monkeypatch):
    from astuner.backbone.debug.warm_start import warm_start
    from astuner.errors import RunFailed

    monkeypatch.chdir(REPO_ROOT)
    ctx = context(tmp_path, "astuner.trainer_common.sft.steps=4", "astuner.trainer_common.sft.min_reward=2.0")
    with pytest.raises(RunFailed, match=r"^astuner.trainer_common.sft: none of the expert's \d+ episodes scored at "
                                        r"least min_reward 2.0 \(mean reward 1.000\)"):
        warm_start(ctx)
    assert not (tmp_path / "run" / "warm_start").exists()
