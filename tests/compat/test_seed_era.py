"""Files written for the seed system (ASTuner, before its rename to AgentJet) load and run as written: its YAML
template key by key (astuner/config/seed_keys.py), a tutorial of that era with its workflow and judge on the debug
backbone, its import paths, and where a module it had went."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from astuner.backbone.translate_common import user_verl_keys
from astuner.config import load_run_config
from astuner.config.validate import all_leaf_paths
from astuner.config.schema import AstunerConfig
from astuner.config.seed_keys import BY_KEY, NO_EFFECT, SAME, TABLE, table
from astuner.errors import ConfigError, PluginError
from tests.conftest import REPO_ROOT
from tests.helpers import LoopbackJSONServer

SEED = Path(__file__).parent / "seed_era"


def leaves(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if dotted in BY_KEY or not isinstance(value, dict):
            out.append(dotted)
        else:
            out += leaves(value, dotted + ".")
    return out


def template(tmp_path: Path, model: Path, **edits: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    text = (SEED / "seed_template.yaml").read_text()
    for rows in ("train", "val"):
        (tmp_path / f"{rows}.jsonl").write_text(json.dumps({"question": "What is 2 + 3?", "answer": "#### 5"}) + "\n")
    text = text.replace("MODEL", str(model)).replace("TRAIN", str(tmp_path / "train.jsonl"))
    text = text.replace("VAL", str(tmp_path / "val.jsonl"))
    for old, new in edits.items():
        text = text.replace(old, new)
    path = tmp_path / "seed_template.yaml"
    path.write_text(text)
    shutil.copytree(SEED / "example_math_agent", tmp_path / "example_math_agent")
    return path


def test_the_table_covers_every_key_of_the_seed_template():
    tree = yaml.safe_load((SEED / "seed_template.yaml").read_text())["astuner"]
    # AgentJet's later name, and a key of the seed's examples (not of its template)
    assert set(leaves(tree)) == set(BY_KEY) - {"rollout.user_workflow", "rollout.mode"}
    assert len(BY_KEY) == len(TABLE)
    declared = set(all_leaf_paths(AstunerConfig, "astuner"))
    assert {f"astuner.{e.key}" for e in TABLE if e.does == SAME} <= declared  # the same key: astuner has it
    page = (REPO_ROOT / "docs" / "migration.md").read_text()
    assert table() in page, "docs/migration.md's table is stale: python -m astuner.config.seed_keys"


def test_the_seed_template_loads_with_each_key_read_as_astuner_reads_it(tmp_path, tiny_model_dir):
    run = load_run_config(template(tmp_path, tiny_model_dir))
    a = run.astuner
    assert run.experiment_name == "seed_template"  # read_yaml_name: the file's name
    assert a.task_reader.type == "dataset_file" and a.task_reader.dataset_file.training.file_path.endswith("train.jsonl")
    assert a.trainer_common.algorithm.use_kl_loss and a.trainer_common.algorithm.kl_loss_coef == 0.002
    assert a.trainer_common.algorithm.kl_loss_type == "low_var_kl"
    assert a.trainer_common.logger == ["console", "tensorboard"]
    assert a.rollout.val_kwargs.num_repeat == 4  # val_pass_n: pass@4 in validation
    assert a.rollout.val_kwargs.temperature == 0.0  # do_sample false: greedy
    assert a.trainer_common.trinity_only__n_vllm_engine == 2 and a.trainer_common.optim.lr == 1e-6
    # verl's own keys, which the verl backbone merges over its translation
    verl = user_verl_keys(run.merged)
    assert verl["actor_rollout_ref"]["actor"]["fsdp_config"] == {"param_offload": True, "optimizer_offload": True}
    assert "debug" not in run.merged["astuner"] and "context_tracker" not in run.merged["astuner"]
    # one line per key the file set that is not astuner's own, saying what became of it
    said = {entry.key for entry in TABLE for note in run.notes if note.startswith(f"astuner.{entry.key} ")}
    expected = {e.key for e in TABLE if e.does != SAME} - {"rollout.user_workflow", "trainer_common.fsdp_config",
                                                          "rollout.mode"}
    assert said >= expected - {"trainer_common.algorithm.use_kl_in_reward"}, expected - said
    assert all("\n" not in note and len(note) < 300 for note in run.notes)
    assert all("no effect: " in note for note in run.notes if BY_KEY[note.split()[0][8:]].does == NO_EFFECT)
    # the run folder's config holds only astuner's keys: a worker that reloads it has nothing to translate
    saved = tmp_path / "saved.yaml"
    saved.write_text(yaml.safe_dump(run.merged))
    reloaded = load_run_config(saved)
    assert reloaded.notes == []
    # ...and keeps the seed keys as written for the seed workflows' model_tuner.config, there and reloaded
    from astuner.config import composed_view

    for loaded in (run, reloaded):
        view = composed_view(loaded.astuner)
        assert view.astuner.rollout.n_vllm_engine == 2 and view.astuner.debug.debug_first_n_tasks == 2
        assert view.astuner.trainer_common.trinity_only__n_vllm_engine == 2 and "astuner_seed_keys" not in view


def test_the_seed_templates_own_choices_astuner_cannot_honour_are_one_line_each(tmp_path, tiny_model_dir):
    path = template(tmp_path, tiny_model_dir, **{"judge_type: customized_protocol": "judge_type: rubrics_auto_grader"})
    with pytest.raises(ConfigError, match=r"^astuner.task_judge.judge_type: 'rubrics_auto_grader' has no astuner "):
        load_run_config(path)


def test_agentjets_user_workflow_is_the_workflow(tmp_path, tiny_model_dir):
    path = template(tmp_path, tiny_model_dir, **{"agentscope_workflow:": "user_workflow:"})
    run = load_run_config(path)
    assert run.astuner.rollout.agentscope_workflow == "example_math_agent/math_agent.py->MathLearn"


def test_a_seed_key_beside_its_astuner_key_saying_otherwise_and_a_mistyped_seed_value_are_refused(
        tmp_path, tiny_model_dir):
    workflow = "agentscope_workflow: example_math_agent/math_agent.py->MathLearn"
    path = template(tmp_path / "a", tiny_model_dir, **{workflow: f"{workflow}\n    user_workflow: other.py->Other"})
    with pytest.raises(ConfigError, match=r"^astuner.rollout.user_workflow 'other.py->Other' \(the seed system's name "
                                          r"for astuner.rollout.agentscope_workflow\) contradicts "):
        load_run_config(path)
    same = template(tmp_path / "b", tiny_model_dir, **{workflow: f"{workflow}\n    user_workflow: "
                                                           f"example_math_agent/math_agent.py->MathLearn"})
    assert load_run_config(same).astuner.rollout.agentscope_workflow == "example_math_agent/math_agent.py->MathLearn"
    path = template(tmp_path / "c", tiny_model_dir, **{"do_sample: false": "do_sample: maybe"})
    with pytest.raises(ConfigError, match=r"^astuner.rollout.val_kwargs.do_sample must be true or false, got 'maybe'"):
        load_run_config(path)


def test_a_seed_era_tutorial_runs_on_debug_as_written(tmp_path, tiny_model_dir, gsm8k_dir):
    """The tutorial's YAML (its keys, astune_default, a relative hydra.searchpath), its workflow (a ReActAgent with a
    Python tool) and its judges (the seed's import paths), in the layout its users have (tutorial/...), run from
    that folder: the user's edits are the model and data paths."""
    folder = tmp_path / "tutorial" / "example_math_agent"
    shutil.copytree(SEED / "example_math_agent", folder)
    conf = folder / "math_agent.yaml"
    conf.write_text(conf.read_text().replace("MODEL", str(tiny_model_dir)).replace("DATA", str(gsm8k_dir)))
    proc = subprocess.run([sys.executable, "-m", "astuner", "--conf", str(conf), "--exp-dir", str(tmp_path / "runs"),
                           "astuner.task_reader.max_val_tasks=4"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    root = tmp_path / "runs" / "math_agent"
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["rollout/episodes"]) for r in rows if "rollout/episodes" in r] == [(1, 4), (2, 4)]
    assert any("val/reward_mean" in r for r in rows)
    saved = yaml.safe_load((root / "config.yaml").read_text())
    assert saved["astuner"]["trainer_common"]["algorithm"]["use_kl_loss"] is True  # the seed's KL keys
    assert "debug" not in saved["astuner"]
    assert "astuner.debug.debug_first_n_tasks (the seed system's key): no effect" in proc.stdout + proc.stderr
    # its trinity: subtree's sync_offset 1 is the schedule, on this backbone too: step 2 rolled out on step 0's weights
    assert saved["astuner"]["trainer_common"]["off_policy"]["sync_offset"] == 1
    assert "sync_offset" not in saved["trinity"]["synchronizer"]
    assert [r["off_policy/version_lag"] for r in rows if "off_policy/version_lag" in r] == [0, 1]
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "trinity.synchronizer.sync_offset 1" in line]
    assert len(said) == 1 and "WARNING" in said[0] and "max_staleness=0 keeps it synchronous" in said[0]


def test_the_seed_systems_import_paths_still_import():
    from astuner.task_judge.base_judge import BaseJudge
    from astuner.task_judge.base import BaseJudge as Current
    from astuner.task_judge.env_service_as_judge import EnvServiceJudge
    from astuner.task_judge.env_service_judge import EnvServiceJudge as CurrentEnv
    from astuner.workflow import WorkflowOutput, WorkflowTask
    from astuner.schema import WorkflowOutput as Output, WorkflowTask as Task

    assert BaseJudge is Current and EnvServiceJudge is CurrentEnv and WorkflowOutput is Output and WorkflowTask is Task


def test_python_m_astuner_tiny_model_still_builds_a_model(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "astuner.tiny_model", str(tmp_path / "m"), "--hidden-size", "32"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "m" / "config.json").is_file() and (tmp_path / "m" / "tokenizer.json").is_file()


def test_a_plugin_importing_a_module_astuner_no_longer_has_is_told_what_to_use(tmp_path):
    from astuner.config.plugin import resolve_plugin

    (tmp_path / "judge.py").write_text("from astuner.utils.robust_dashscope import RobustDashScopeChatModel\n")
    with pytest.raises(PluginError) as caught:
        resolve_plugin(f"{tmp_path / 'judge.py'}->J", "astuner.task_judge.judge_protocol")
    said = str(caught.value)
    assert "astuner has no module 'astuner.utils.robust_dashscope'" in said and "DashScopeChatModel" in said
    assert "install" not in said
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "wf.py").write_text("import astuner.task_runner.agentscope_runner\n")
    with pytest.raises(PluginError, match=r"imports 'astuner.task_runner.*astuner does not have.*astuner.Workflow"):
        resolve_plugin("pkg.wf->W", "astuner.rollout.agentscope_workflow", extra_roots=[tmp_path])
    # learn2ask's import, its workflow named by a module path: the hint of the module the import names
    (tmp_path / "pkg" / "learn2ask.py").write_text("from astuner.utils.robust_dashscope import RobustDashScopeChatModel\n")
    with pytest.raises(PluginError) as caught:
        resolve_plugin("pkg.learn2ask->W", "astuner.rollout.agentscope_workflow", extra_roots=[tmp_path])
    said = str(caught.value)
    assert "imports 'astuner.utils.robust_dashscope'" in said and "DashScopeChatModel" in said, said


def test_create_external_llm_fn_asks_the_endpoint_through_the_openai_sdk(monkeypatch):
    from astuner.task_rollout.dashscope_llm_bridge import create_external_llm_fn

    def chat(path, body):
        return 200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "<Correct>"}}]}

    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    monkeypatch.delenv("DASHSCOPE_API_KEY_BACKUP", raising=False)
    ask = create_external_llm_fn(alien_llm_model="checker", alien_llm_response_length=16)
    with pytest.raises(RuntimeError, match="DASHSCOPE_API_KEY is not set"):
        ask(messages=[{"role": "user", "content": "2 + 2 = 4?"}])
    with LoopbackJSONServer(chat) as server:
        monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-a|sk-b")
        monkeypatch.setenv("DASHSCOPE_BASE_URL", f"{server.url}/v1")
        assert ask(messages=[{"role": "user", "content": "2 + 2 = 4?"}]) == {"role": "assistant",
                                                                             "content": "<Correct>"}
        (path, body), headers = server.requests[0], server.headers[0]
    assert path == "/v1/chat/completions" and body["model"] == "checker"
    assert body["max_completion_tokens"] == 16 and body["temperature"] == 0.0
    assert {k.lower(): v for k, v in headers.items()}["authorization"] in ("Bearer sk-a", "Bearer sk-b")


def test_agentjets_as_agentscope_model_is_register_model(tokenizer):
    from astuner.model.engines.base import SamplingParams
    from astuner.model.model_tuner import ModelTuner
    from astuner.schema.calls import EpisodeRecorder

    tuner = ModelTuner(None, tokenizer, SamplingParams(), 256, EpisodeRecorder(), trainable_targets=["solver"])
    assert isinstance(tuner.as_agentscope_model(target_tag="solver"), ModelTuner)
    stand_in = object()
    assert tuner.as_agentscope_model(agent_name="critic", target_tag="other", debug_model=stand_in) is stand_in


def test_a_trinity_subtrees_schedule_is_astuners_and_may_not_contradict_it(tmp_path, tiny_model_dir):
    path = template(tmp_path, tiny_model_dir)
    path.write_text(path.read_text() + "trinity:\n  synchronizer: {sync_interval: 2, sync_method: nccl}\n")
    run = load_run_config(path)
    assert run.astuner.trainer_common.off_policy.sync_interval == 2
    assert run.merged["trinity"]["synchronizer"] == {"sync_method": "nccl"}
    assert "trinity.synchronizer.sync_interval 2: read as astuner.trainer_common.off_policy.sync_interval" in run.notes[-1]
    with pytest.raises(ConfigError, match=r"^trinity.synchronizer.sync_interval 2 and astuner.trainer_common.off_policy"
                                          r".sync_interval 4 disagree"):
        load_run_config(path, ["astuner.trainer_common.off_policy.sync_interval=4"])


def test_a_trinity_subtrees_schedule_that_rolls_out_ahead_is_a_warning_and_max_staleness_0_keeps_a_run_in_step(
        tmp_path, tiny_model_dir):
    """A migrating user gets the off-policy mode from the seed file's `sync_offset: 1` only with a WARNING line naming
    the key that turns it off; that key, set, leaves the subtree's schedule unread (said in a line)."""
    from astuner.config.notes import WarningNote

    path = template(tmp_path, tiny_model_dir)
    path.write_text(path.read_text() + "trinity:\n  synchronizer: {sync_offset: 1}\n")
    run = load_run_config(path)
    assert run.astuner.trainer_common.off_policy.sync_offset == 1
    warning = run.notes[-1]
    assert isinstance(warning, WarningNote) and "this run is off-policy, its samples up to 1 version(s) older" in warning
    assert warning.endswith("astuner.trainer_common.off_policy.max_staleness=0 keeps it synchronous")
    synchronous = load_run_config(path, ["astuner.trainer_common.off_policy.max_staleness=0"])
    assert synchronous.astuner.trainer_common.off_policy.sync_offset is None
    assert "sync_offset" not in synchronous.merged["trinity"]["synchronizer"]
    assert not isinstance(synchronous.notes[-1], WarningNote) and "not read" in synchronous.notes[-1]
