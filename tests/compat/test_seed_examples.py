"""The seed system's own examples (modelscope/AgentJet at f9fab4f, the ASTuner era's `tutorial/example_*`), their
files as written under `seed_era/tutorial/`, run with machine edits only (the model's path, sizes on the command
line, an unreachable endpoint's address): frozenlake and werewolves train 2 steps on debug; appworld's
`--dry-run` names each problem its run would hit in one line each."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from tests.conftest import run_cli

SEED = Path(__file__).parent / "seed_era" / "tutorial"
SIZES = ["astuner.trainer_common.total_training_steps=2", "astuner.rollout.num_repeat=2",
         "astuner.task_reader.max_val_tasks=2", "astuner.rollout.max_model_len=4096",
         "astuner.data.max_prompt_length=3000", "astuner.data.max_response_length=1000",
         "astuner.rollout.max_response_length_in_one_turn=48", "astuner.trainer_common.logger=[console]"]


def seed_example(root: Path, name: str, model: Path, seed_model: str, **edits: str) -> Path:
    """`tutorial/example_<name>` copied under `root` as the seed repository lays it out (its workflows are named
    by module paths from the repository root), with the model path (and `edits`) replaced: a machine's edits."""
    shutil.copytree(SEED / f"example_{name}", root / "tutorial" / f"example_{name}")
    for path in (root / "tutorial" / f"example_{name}").iterdir():
        text = path.read_text().replace(seed_model, str(model))
        for old, new in edits.items():
            text = text.replace(old, new)
        path.write_text(text)
    return root


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def trains_two_steps(conf: str, run: Path, capsys, *overrides: str) -> list[dict]:
    """`astuner --conf conf` with the sizes: it ends 0 after steps 1 and 2, no episode failing; step 1's episodes."""
    code, out, err = run_cli(["--conf", conf, "--exp-dir", str(run.parent), *overrides, *SIZES], capsys)
    assert code == 0, err[-3000:]
    steps = [r for r in rows(run) if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2] and all(r["rollout/error_rate"] == 0.0 for r in steps), steps
    return episodes(run, 1)


def episodes(run: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (run / "trajectories" / f"step_{step}.jsonl").read_text().splitlines()]


def test_the_seed_frozenlake_example_trains_two_steps_on_debug(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """Its workflow reads the run's config through `model_tuner.config` (its own `frozen_lake:` section and the
    seed key `rollout.multi_turn.max_steps`), its tasks come from `task_reader.type: random_dummy`."""
    pytest.importorskip("gymnasium")
    root = seed_example(tmp_path / "repo", "frozenlake", tiny_model_dir,
                        "/mnt/data_cpfs/model_cache/modelscope/hub/Qwen/Qwen/Qwen2___5-3B-Instruct")
    monkeypatch.chdir(root)
    played = trains_two_steps("tutorial/example_frozenlake/frozenlake_easy.yaml", tmp_path / "runs" / "frozenlake_easy",
                              capsys, "astuner.data.train_batch_size=2")
    assert {e["task_id"] for e in played} <= {str(n) for n in range(1000)} and all(e["calls"] >= 1 for e in played)
    # the workflow's metadata: it ran its own loop (max_steps from the config) to an end it names
    assert all(e["metadata"]["terminate_reason"] in ("success", "max_steps_reached", "agent_error")
               for e in played), [e["metadata"] for e in played]


def test_the_seed_werewolves_example_trains_two_steps_on_debug(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """Its workflow declares `trainable_targets: list = Field(default=["werewolf"])` (the seed's Workflow was a
    pydantic model): only the werewolves' calls are trained; the other roles' model is its own endpoint's (here a
    port nothing listens on: the machine edit of its address)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = seed_example(tmp_path / "repo", "werewolves", tiny_model_dir,
                        "/mnt/data_cpfs/model_cache/modelscope/hub/Qwen/Qwen/Qwen2___5-7B-Instruct",
                        **{"http://22.17.52.4:2888/v1": f"http://127.0.0.1:{port}/v1"})
    monkeypatch.chdir(root)
    played = trains_two_steps("tutorial/example_werewolves/werewolves.yaml", tmp_path / "runs" / "werewolves", capsys,
                              "astuner.data.train_batch_size=1")
    assert all(e["agents"] == ["werewolf"] and e["calls"] >= 1 for e in played), [(e["agents"], e["calls"])
                                                                                   for e in played]


def test_the_seed_appworld_examples_dry_run_names_each_problem_in_one_line(tiny_model_dir, tmp_path, capsys,
                                                                          monkeypatch):
    """Its `Field` default works; what it reads that astuner has no equivalent for is refused before anything is
    written, one line each with the file and line: `workflow_task.gym_env` and
    `model_tuner.get_context_tracker()` (its environment service's address aside)."""
    root = seed_example(tmp_path / "repo", "appworld", tiny_model_dir,
                        "/mnt/data_cpfs/model_cache/modelscope/hub/Qwen/Qwen/Qwen2___5-14B-Instruct")
    monkeypatch.chdir(root)
    code, out, err = run_cli(["--conf", "tutorial/example_appworld/appworld.yaml", "--exp-dir",
                              str(tmp_path / "runs"), "--dry-run", "astuner.task_reader.type=env_service",
                              "astuner.task_reader.env_service.env_url=http://127.0.0.1:8080",
                              "astuner.task_reader.env_service.env_type=appworld"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
    assert code == 2 and len(lines) == 4 and lines[0] == "astuner: error: 3 problems:", err[-3000:]
    assert "ExampleAgentScopeWorkflow uses gym_env (at tutorial/example_appworld/appworld.py:42)" in lines[1]
    assert "is workflow_task.env in astuner" in lines[1]
    assert "uses get_context_tracker (at tutorial/example_appworld/appworld.py:56)" in lines[2]
    assert "astuner records an episode's calls itself" in lines[2]
    assert "cannot reach the environment service at http://127.0.0.1:8080" in lines[3]  # none runs here
    assert not (tmp_path / "runs").exists()
