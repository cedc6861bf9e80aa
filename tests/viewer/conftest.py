"""A run the tiny demo trains for real (debug backbone), shared by the viewer's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

STEPS = 30


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    from astuner.cli import main

    out = tmp_path_factory.mktemp("viewer_run")
    code = main(["--conf", str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml"), "--exp-dir", str(out),
                 f"astuner.model.path={out}/model", f"astuner.trainer_common.total_training_steps={STEPS}",
                 "astuner.trainer_common.save_freq=-1", "astuner.trainer_common.test_freq=10"])
    assert code == 0
    return out / "tiny_cpu"


@pytest.fixture(scope="session")
def viewer(tiny_run):
    """The viewer serving that run, on 127.0.0.1 and a free port."""
    from astuner.viewer import start_viewer

    server = start_viewer(tiny_run)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def multi_agent_run(tmp_path_factory) -> Path:
    """One step of the multi-agent tutorial (three agents, three policies), its trajectories recorded."""
    from astuner.cli import main

    out = tmp_path_factory.mktemp("multi_agent_run")
    code = main(["--conf", str(REPO_ROOT / "tutorial" / "example_multi_agent_cpu" / "signal_game.yaml"),
                 "--exp-dir", str(out), f"astuner.model.path={out}/model", "astuner.trainer_common.total_training_steps=1",
                 "astuner.trainer_common.val_before_train=false", "astuner.data.train_batch_size=2",
                 "astuner.rollout.num_repeat=2"])
    assert code == 0
    return out / "signal_game"
