"""`--backbone debug` end to end on CPU: records, weights change, exact resume, Ctrl-C, the math agent."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import REPO_ROOT, run_cli

TINY = REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml"


def tiny_args(steps, *extra):
    return ["--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", f"astuner.trainer_common.total_training_steps={steps}",
            "astuner.data.train_batch_size=4", "astuner.rollout.num_repeat=4", *extra]


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model" / "model.safetensors"))


def test_tiny_run_writes_records_and_changes_weights(project, capsys):
    # groups with equal rewards are kept so that the entropy bonus alone guarantees an update
    code, _, err = run_cli(tiny_args(4, "astuner.trainer_common.save_freq=2", "astuner.trainer_common.test_freq=2",
                                     "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"), capsys)
    assert code == 0, err
    root = project / "launcher_record" / "tiny_cpu"
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]  # validation before training, then 4 steps
    step = rows[2]
    for key in ("reward/mean", "reward/std", "reward/success_rate", "rollout/error_rate", "rollout/madness_rate",
                "train/response_length_mean", "perf/time_rollout_s", "perf/time_update_s",
                "perf/time_weight_sync_s", "val/reward_mean"):
        assert key in step, key
    assert list((root / "tensorboard").glob("events.out.tfevents.*"))
    trajectory = [json.loads(line) for line in (root / "trajectories" / "step_1.jsonl").read_text().splitlines()]
    assert len(trajectory) == 16 and {"task_id", "reward", "advantage", "messages", "response"} <= set(trajectory[0])
    assert (root / "reward_curve.png").stat().st_size > 1000
    for n in (2, 4):
        ckpt = root / "checkpoints" / f"global_step_{n}"
        assert (ckpt / "COMPLETE").exists() and (ckpt / "trainer_state.pt").exists()
        assert (ckpt / "model" / "config.json").exists() and (ckpt / "model" / "tokenizer.json").exists()
    initial = project / "launcher_record" / ".models" / "tiny_cpu_seed0"
    from safetensors.torch import load_file

    start = load_file(str(initial / "model.safetensors"))
    end = weights(root / "checkpoints" / "global_step_4")
    assert any(not torch.equal(start[k], end[k]) for k in start)


def test_resume_equals_uninterrupted_run(project, capsys):
    keep = "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"  # an update every step
    assert run_cli(tiny_args(4, "astuner.experiment_name=straight", keep), capsys)[0] == 0
    assert run_cli(tiny_args(2, "astuner.experiment_name=split", keep), capsys)[0] == 0
    code, _, err = run_cli(tiny_args(4, "astuner.experiment_name=split", keep) + ["--resume"], capsys)
    assert code == 0, err
    a = weights(project / "launcher_record" / "straight" / "checkpoints" / "global_step_4")
    b = weights(project / "launcher_record" / "split" / "checkpoints" / "global_step_4")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows_a = (project / "launcher_record" / "straight" / "metrics.jsonl").read_text().splitlines()
    rows_b = (project / "launcher_record" / "split" / "metrics.jsonl").read_text().splitlines()
    pick = lambda rows: [(json.loads(r).get("reward/mean"), json.loads(r).get("actor/pg_loss")) for r in rows]  # noqa: E731
    assert pick(rows_a) == pick(rows_b) and len(rows_a) == 5


def test_ctrl_c_saves_and_exits_130(project):
    args = tiny_args(100000, "astuner.trainer_common.save_freq=100000", "astuner.trainer_common.test_freq=-1",
                     "astuner.trainer_common.val_before_train=false")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "astuner", *args], cwd=project, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = project / "launcher_record" / "tiny_cpu" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and \
            (not metrics.exists() or len(metrics.read_text().splitlines()) < 2):
        time.sleep(0.2)
    assert proc.poll() is None and metrics.exists() and len(metrics.read_text().splitlines()) >= 2, \
        proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    done = len(metrics.read_text().splitlines())
    ckpt = project / "launcher_record" / "tiny_cpu" / "checkpoints" / f"global_step_{done}"
    assert (ckpt / "COMPLETE").exists()
    assert "continue with --resume" in err


def test_math_agent_trains_two_steps_and_resumes(tiny_model_dir, gsm8k_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO_ROOT)
    args = ["--conf", "tutorial/example_math_agent/math_agent.yaml", "--exp-dir", str(tmp_path / "runs"),
            f"astuner.task_reader.huggingface_dat_repo.dataset_path={gsm8k_dir}",
            "astuner.task_reader.huggingface_dat_repo.validation_split=null",
            f"astuner.model.path={tiny_model_dir}", "astuner.data.train_batch_size=2", "astuner.rollout.num_repeat=2",
            "astuner.rollout.max_response_length_in_one_turn=16", "astuner.rollout.max_model_len=4096",
            "astuner.data.max_prompt_length=3000", "astuner.data.max_response_length=1000",
            "astuner.trainer_common.optim.lr=1e-4", "astuner.trainer_common.total_training_steps=2",
            "astuner.trainer_common.device=cpu"]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    root = tmp_path / "runs" / "math_agent"
    assert (root / "checkpoints" / "global_step_2" / "COMPLETE").exists()
    saved = yaml.safe_load((root / "config.yaml").read_text())
    assert saved["astuner"]["model"]["path"] == str(tiny_model_dir)
    code, _, err = run_cli(args[:-2] + ["astuner.trainer_common.total_training_steps=3", "--resume"], capsys)
    assert code == 0, err
    assert (root / "checkpoints" / "global_step_3" / "COMPLETE").exists()
    assert [json.loads(line)["step"] for line in (root / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_bots_selector_and_operators_in_the_debug_backbone(project, capsys):
    rows = [json.loads(line) for line in (project / "tutorial/example_tiny_cpu/train.jsonl").read_text().splitlines()]
    with open(project / "features.jsonl", "w") as fh:
        for i, row in enumerate(rows[:40]):
            fh.write(json.dumps({**row, "weak": (i % 5) / 10, "strong": (i % 5) / 10 + 0.4}) + "\n")
    args = tiny_args(3, "astuner.task_reader.dataset_file.training.file_path=features.jsonl",
                     "astuner.task_reader.task_selector.selector_type=difficulty_based",
                     "astuner.task_reader.task_selector.feature_keys=[weak,strong]",
                     "+astuner.task_reader.task_selector.kwargs={tau: 0, target_reward: 0.5, m: 4}",
                     "astuner.data_processor.experience_pipeline.operators=[{name: pass_rate_calculator}, "
                     "{name: reward_std_filter}]", "astuner.trainer_common.val_before_train=false",
                     "astuner.trainer_common.test_freq=-1")
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    root = project / "launcher_record" / "tiny_cpu"
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert all("selection/valid_ratio" in r and "data/reward_std_filter_dropped" in r for r in rows)
    state = torch.load(root / "checkpoints" / "global_step_3" / "trainer_state.pt", weights_only=False)
    estimator = state["selector"]["estimator"]
    assert estimator["cap"] is not None and len(estimator["alphas"]) == 40  # the selector learned from feedback


def test_kl_loss_is_to_the_initial_policy(project, capsys):
    """use_kl_loss: KL to a frozen copy of the initial policy — 0 on the first update, positive once the policy
    moved (a reference that is the live policy itself would read 0 at every step)."""
    al = "astuner.trainer_common.algorithm"
    code, _, err = run_cli(tiny_args(2, f"{al}.use_kl_loss=true", f"{al}.kl_loss_coef=0.1", f"{al}.entropy_coeff=0.01",
                                     f"{al}.drop_zero_variance_groups=false", "astuner.trainer_common.test_freq=-1"),
                           capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in
            (project / "launcher_record" / "tiny_cpu" / "metrics.jsonl").read_text().splitlines()]
    kl = {r["step"]: r["actor/kl"] for r in rows if "actor/kl" in r}
    assert abs(kl[1]) < 1e-6 and kl[2] > 1e-5, kl


def test_bf16_recipe_keeps_small_updates(project, capsys):
    """dtype bf16 (the GPU recipe, run here on the CPU): bf16 compute over fp32 weights and optimizer state.
    At lr 1e-6 an update moves nearly every weight; stepping bf16 weights directly would round ~98% of the
    changes away."""
    code, _, err = run_cli(tiny_args(1, "astuner.trainer_common.dtype=bf16", "astuner.trainer_common.optim.lr=1e-6",
                                     "astuner.trainer_common.save_freq=1", "astuner.trainer_common.test_freq=-1",
                                     "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"), capsys)
    assert code == 0, err
    assert "(bf16 compute, fp32 weights)" in err
    from safetensors.torch import load_file

    start = load_file(str(project / "launcher_record" / ".models" / "tiny_cpu_seed0" / "model.safetensors"))
    end = weights(project / "launcher_record" / "tiny_cpu" / "checkpoints" / "global_step_1")
    assert all(t.dtype == torch.float32 for t in end.values())
    changed = sum(int((start[k] != end[k]).sum()) for k in start) / sum(t.numel() for t in start.values())
    assert changed > 0.9, changed


def test_first_update_at_top_p_half_is_not_clipped(project, capsys):
    """top_p 0.5: the engine's log-probs are under the nucleus, the trainer's recomputation under the full
    softmax is the ratio's denominator: one epoch, one mini-batch, ratio 1 and nothing clipped."""
    code, _, err = run_cli(tiny_args(1, "astuner.rollout.top_p=0.5", "astuner.trainer_common.test_freq=-1",
                                     "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"), capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in
            (project / "launcher_record" / "tiny_cpu" / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if r["step"] == 1]
    assert row["actor/clip_frac"] == 0.0 and abs(row["actor/ratio_mean"] - 1.0) < 1e-5
    assert row["actor/rollout_logprob_diff"] > 0.01  # the engine's nucleus log-probs differ


def test_resume_of_a_finished_run_has_nothing_to_do(project, capsys):
    args = tiny_args(2, "astuner.trainer_common.test_freq=-1")
    assert run_cli(args, capsys)[0] == 0
    metrics = project / "launcher_record" / "tiny_cpu" / "metrics.jsonl"
    before = metrics.read_text()
    code, _, err = run_cli(args + ["--resume"], capsys)
    assert code == 0 and "nothing to do: the run finished its 2 steps" in err
    assert metrics.read_text() == before


def test_resume_without_a_checkpoint_says_so_and_starts_over(project, capsys):
    args = tiny_args(2, "astuner.trainer_common.test_freq=-1")
    assert run_cli(args, capsys)[0] == 0
    root = project / "launcher_record" / "tiny_cpu"
    shutil.rmtree(root / "checkpoints" / "global_step_2")  # as if the run had died before its first checkpoint
    code, _, err = run_cli(args + ["--resume"], capsys)
    assert code == 0 and "holds no complete checkpoint; starting from step 0" in err
    steps = [json.loads(line)["step"] for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]  # the dead run's rows are not left in front of the new run's


def test_the_step_line_shows_the_madness_rate_when_an_episode_was_mad():
    """A 0/1 judge's mean reward below 0 is the madness reward at work: the line says so."""
    from astuner.backbone.debug.step_records import step_line

    m = {"reward/mean": -0.008, "reward/success_rate": 0.0, "rollout/error_rate": 0.0, "perf/time_step_s": 1.0,
         "rollout/madness_rate": 0.016}
    assert "madness 0.02" in step_line(1, 60, m, {})
    assert "madness" not in step_line(1, 60, {**m, "rollout/madness_rate": 0.0}, {})
