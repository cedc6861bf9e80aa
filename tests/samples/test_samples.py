"""agentscope-samples' tuner examples, shaped as written: each folder holds the sample's own `main.py` (the import
swapped to astuner.tuner, model paths from the environment, CPU sizes), its Trinity-RFT config, and the same job
as an astuner YAML. Both routes train on the debug backbone, run as a user runs them (a subprocess in the
sample's folder): a single-agent environment game whose rows have no query, a seven-player game where two
trained players face five on a frozen auxiliary model, with a text metric and more than four trained calls per
episode, a math agent whose judge imports Trinity-RFT's reward function (data_augment), and a doctor that learns to
ask, graded by an auxiliary model (learn_to_ask)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.samples.sample_data import ROWS, prepare_email_search, write_jsonl

HERE = Path(__file__).parent
def sample(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(HERE / name, folder, ignore=shutil.ignore_patterns("__pycache__"))
    write_jsonl(folder / "data" / "train.jsonl", ROWS[name])
    return folder


def test_data_augment_main_py_says_what_replaces_trinitys_reward_function_then_trains(tmp_path, tiny_model_dir,
                                                                                      gsm8k_dir):
    """data_augment's judge imports Trinity-RFT's MathBoxedRewardFn, which astuner's environment does not have:
    refused before a run folder exists, in one line naming the import and astuner's scoring; with that edit made,
    the sample trains on debug with its own config (a random task selector, weights every 4 steps)."""
    folder = tmp_path / "data_augment"
    shutil.copytree(HERE / "data_augment", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "data").mkdir()
    rows = (gsm8k_dir / "train.jsonl").read_text().splitlines()[:8]
    (folder / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    env = {**os.environ, "TRINITY_MODEL_PATH": str(tiny_model_dir), "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")}
    done = subprocess.run([sys.executable, "main.py", "--config", "config_random.yaml"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "judge_func: gsm8k_judge imports trinity.common.rewards.math_reward" in last, \
        done.stderr[-3000:]
    assert "astuner.task_judge.math_answer" in last and not (tmp_path / "ckpt").exists()
    main = folder / "main.py"  # the user's edit the line names: astuner's boxed-answer scoring
    main.write_text(main.read_text().replace(
        "    from trinity.common.rewards.math_reward import MathBoxedRewardFn\n\n    reward_fn = MathBoxedRewardFn()\n",
        "    from astuner.task_judge.math_answer import answers_match, extract_answer\n\n"
        "    def reward_fn(response, truth):\n"
        "        return {\"accuracy\": float(answers_match(extract_answer(response) or \"\", truth))}\n"))
    log = run([sys.executable, "main.py", "--config", "config_random.yaml"], folder,
              {"TRINITY_MODEL_PATH": str(tiny_model_dir), "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")})
    metrics, _, _ = records(tmp_path / "ckpt" / "MathAgent" / "data_augment_random")
    assert [m["step"] for m in metrics] == [1, 2] and "accuracy" in " ".join(metrics[0])
    assert [m["off_policy/version_lag"] for m in metrics] == [0, 1]  # sync_interval 4: both on the first weights
    assert "tune: config_random.yaml is a Trinity-RFT config" in log


def run(argv: list[str], folder: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=folder, env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    return log


def records(root: Path) -> tuple[list[dict], list[dict], list[dict]]:
    metrics = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    episodes = [json.loads(line) for line in (root / "trajectories" / "step_1.jsonl").read_text().splitlines()]
    with gzip.open(root / "trajectories" / "step_1.tokens.jsonl.gz", "rt") as fh:
        tokens = [json.loads(line) for line in fh]
    return metrics, episodes, tokens


def check_werewolves(root: Path, log: str, trained_side: str) -> None:
    metrics, episodes, tokens = records(root)
    assert [m["step"] for m in metrics] == [1, 2]
    # the trained side's players, named on every sample: 2 werewolves or 5 good guys, three turns each
    side = 2 if trained_side == "werewolf" else 5
    for e in episodes:
        assert not e["failed"], e["error"]
        assert len(e["agents"]) == side and all(a.startswith("Player") for a in e["agents"])
        # every call trained; three turns each, but for a last turn whose prompt no longer leaves room for the reply
        # within max_model_len (refused with the context-exhausted reply, not recorded: five good guys' long history)
        assert sum(s["num_calls"] for s in e["samples"]) == e["calls"] > 4 and 2 * side < e["calls"] <= 3 * side
        assert e["calls"] == 3 * side or e["truncated"]
        assert {s["agent"] for s in e["samples"]} == set(e["agents"])
        assert e["metrics"]["trainable_target"] == trained_side  # a text metric, kept as text
    assert all(t["agent"].startswith("Player") for t in tokens)
    assert all("workflow/trainable_target" not in m for m in metrics) and "workflow/success" in metrics[0]
    assert metrics[0]["rollout/dropped_samples"] == 0 and metrics[0]["rollout/madness_rate"] == 0
    assert "workflow metric 'trainable_target' is not a number" in log


def test_learn_to_ask_main_py_trains_with_its_config_and_its_grading_model(tmp_path, tiny_model_dir):
    """learn_to_ask as written: its names (TunerChatModel, Dataset, Algorithm; reasoning_parser=None), prompts
    loaded from the file beside main.py, a judge that asks the auxiliary model to grade the questions it should
    ask, and its config's schedule (weights every 10 steps: both steps on the first weights)."""
    folder = sample("learn_to_ask", tmp_path)
    log = run([sys.executable, "main.py"], folder, {
        "TRINITY_MODEL_PATH": str(tiny_model_dir), "TRINITY_AUXILIARY_MODEL_PATH": str(tiny_model_dir),
        "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")})
    root = tmp_path / "ckpt" / "learn2ask" / "learn2ask_grpo"
    metrics, episodes, _ = records(root)
    assert [m["step"] for m in metrics] == [1, 2] and "tune: " in log
    assert [m["off_policy/version_lag"] for m in metrics] == [0, 1]
    for e in episodes:
        assert not e["failed"], e["error"]
    # the grader was asked once about each episode that went on asking where it should (the rows of even index)
    for e in episodes:
        asked_on = int(e["task_id"].rsplit("_", 1)[-1]) % 2 == 0 and e["metrics"]["action"] == 1.0
        assert e["metrics"]["auxiliary_calls"] == (1.0 if asked_on else 0.0), e["metrics"]
    assert any(e["metrics"]["auxiliary_calls"] == 1.0 for e in episodes)
    written = yaml.safe_load((root / "config.yaml").read_text())["astuner"]
    assert written["auxiliary_models"]["auxiliary_model"]["path"] == str(tiny_model_dir)


@pytest.mark.parametrize("config,name,side", [("config.yaml", "Werewolves-7Player-GRPO", "werewolf"),
                                              ("config_train_goodguy.yaml", "Werewolves-7Player-GRPO-train-goodguy",
                                               "good_guy")])
def test_werewolves_main_py_trains_with_each_of_the_samples_trinity_configs(tmp_path, tiny_model_dir, config, name,
                                                                          side):
    """Both of the sample's configs: config.yaml trains the werewolves, config_train_goodguy.yaml (its README: "use
    config_train_goodguy.yaml", main.py's config_path edited) the five good guys."""
    folder = sample("werewolves", tmp_path)
    # the user's edit: main.py names its participant model's folder; the config file's explorer.auxiliary_models
    # entry keeps its hub id (TRINITY_AUXILIARY_MODEL_PATH unset), which tune()'s argument replaces
    main = folder / "main.py"
    source = main.read_text().replace('os.environ["TRINITY_AUXILIARY_MODEL_PATH"]', repr(str(tiny_model_dir)))
    main.write_text(source.replace('"config.yaml"', repr(config)))
    env = {"TRINITY_MODEL_PATH": str(tiny_model_dir), "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")}
    log = run([sys.executable, "main.py"], folder, env)
    check_werewolves(tmp_path / "ckpt" / "AgentScope-Werewolves" / name, log, side)  # its workflow_args reached it
    assert "applied on backbone trinity only: " in log and "explorer.over_rollout.ratio" in log
    import yaml

    root = tmp_path / "ckpt" / "AgentScope-Werewolves" / name
    written = yaml.safe_load((root / "config.yaml").read_text())["astuner"]  # tune(): no cap, no reward rewrite
    assert written["rollout"]["multi_turn"]["max_sample_per_task"] is None
    assert written["rollout"]["compute_madness_checklist"] == []
    assert written["auxiliary_models"]["participant"]["path"] == str(tiny_model_dir)  # explorer.auxiliary_models
    assert "buffer.train_batch_size is taken as the debug backbone's own way" in log


def test_werewolves_yaml_route_trains_with_a_frozen_auxiliary_model(tmp_path):
    folder = sample("werewolves", tmp_path)
    log = run([sys.executable, "-m", "astuner", "--conf", "werewolves.yaml", "--backbone=debug", "--exp-dir", "runs"],
              folder, {})
    check_werewolves(folder / "runs" / "werewolves_yaml", log, "werewolf")
    assert (folder / "werewolves_participant" / "config.json").is_file()  # the tiny auxiliary model, made here


@pytest.mark.parametrize("route", ["main.py", "yaml"])
def test_frozen_lake_rows_without_a_query_train(tmp_path, tiny_model_dir, route):
    folder = sample("frozen_lake", tmp_path)
    if route == "main.py":  # with agentscope-samples' data_augment schedule: weights to the engine every 4 steps
        config = folder / "config.yaml"
        config.write_text(config.read_text().replace("sync_interval: 1}", "sync_interval: 4}"))
        log = run([sys.executable, "main.py"], folder, {"TRINITY_MODEL_PATH": str(tiny_model_dir),
                                                        "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")})
        root = tmp_path / "ckpt" / "FrozenLake" / "frozen_lake_grpo"
    else:
        log = run([sys.executable, "-m", "astuner", "--conf", "frozen_lake.yaml", "--backbone=debug", "--exp-dir",
                   "runs"], folder, {})
        root = folder / "runs" / "frozen_lake_yaml"
    metrics, episodes, _ = records(root)
    assert [m["step"] for m in metrics] == [1, 2] and "no task has a query: the workflow reads their rows" in log
    for e in episodes:
        assert not e["failed"], e["error"]
        assert e["agents"] == ["walker"] and e["calls"] >= 1 and e["metrics"]["map"] == "3x3"
    assert {e["task_id"] for e in episodes} <= {f"lake-{i}" for i in range(4)} | {f"train_{i}" for i in range(4)}
    if route == "main.py":  # Trinity's meaning on the debug backbone: both steps rolled out on the initial weights
        assert [m["off_policy/version_lag"] for m in metrics] == [0, 1]
        # the config's advantage_fn_args.std_threshold: Trinity's group filter, as an operator (2 episodes a task)
        saved = yaml.safe_load((root / "config.yaml").read_text())
        (op,) = saved["astuner"]["data_processor"]["experience_pipeline"]["operators"]
        assert op["name"] == "reward_std_filter" and abs(op["args"]["threshold"] - 1e-4 * 0.5 ** 0.5) < 1e-12


def test_math_agent_main_py_trains_on_a_local_copy_of_gsm8k_with_its_subset(tmp_path, tiny_model_dir, gsm8k_dir):
    """math_agent as written asks for GSM8K's subset "main" (DatasetConfig.name); a local copy laid out as the hub's
    (a README's configs: main) trains with it. Without the layout the error names the subset's key (it named the
    dataset's path)."""
    folder = tmp_path / "math_agent"
    shutil.copytree(HERE / "math_agent", folder, ignore=shutil.ignore_patterns("__pycache__"))
    rows = (gsm8k_dir / "train.jsonl").read_text().splitlines()[:8]
    (folder / "data").mkdir()
    (folder / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    env = {**os.environ, "TRINITY_MODEL_PATH": str(tiny_model_dir)}
    done = subprocess.run([sys.executable, "main.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=900)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "DatasetConfig.name" in last and "has no subset 'main'" in last, done.stderr[-2000:]
    assert not (folder / "checkpoints").exists()
    (folder / "data" / "train.jsonl").unlink()
    (folder / "data" / "main").mkdir()
    (folder / "data" / "main" / "train.jsonl").write_text("\n".join(rows) + "\n")
    (folder / "data" / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n"
                                               "  - split: train\n    path: main/train.jsonl\n---\n")
    run([sys.executable, "main.py"], folder, {"TRINITY_MODEL_PATH": str(tiny_model_dir)})
    (root,) = (folder / "checkpoints" / "AgentScope").iterdir()  # tune()'s default project, a timestamped name
    metrics, episodes, _ = records(root)
    assert [m["step"] for m in metrics] == [1, 2]
    for e in episodes:
        assert not e["failed"], e["error"]


def test_email_search_main_py_on_debug_names_what_only_trinity_runs_before_anything_is_written(tmp_path,
                                                                                               tiny_model_dir):
    """email_search's config names Trinity's `rec` policy loss, its `k2` KL and a batch-level advantage
    normalization, which the debug backbone has no meaning for: one line naming each and the backbone that runs them
    (it trains there: the trinity CI job), before a run folder exists."""
    folder = tmp_path / "email_search"
    shutil.copytree(HERE / "email_search", folder, ignore=shutil.ignore_patterns("__pycache__"))
    db = prepare_email_search(folder, sys.executable)
    env = {**os.environ, "DEFAULT_EMAIL_DB_PATH": str(db), "TRINITY_MODEL_PATH": str(tiny_model_dir),
           "TRINITY_AUXILIARY_MODEL_PATH": str(tiny_model_dir), "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")}
    done = subprocess.run([sys.executable, "main.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "(a Trinity-RFT config)" in last, done.stderr[-3000:]
    for said in ("algorithm.advantage_fn_args.std_cal_level: 'batch'", "algorithm.policy_loss_fn='rec'",
                 "algorithm.kl_loss_fn='k2'", 'use backbone="trinity"'):
        assert said in last
    assert not (tmp_path / "ckpt").exists()
    # the sample's own prepare_data.py built the inbox: its full-text index answers the tools
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute("SELECT count(*) FROM emails_fts WHERE emails_fts MATCH 'curve'").fetchone()
    assert count == 1
