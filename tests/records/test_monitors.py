"""trainer_common.logger: a debug run writes its step metrics to wandb, swanlab and mlflow offline into the run
folder, and each tracker's own files hold the same scalars as metrics.jsonl."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO_ROOT
from tests.records.tracker_files import mlflow_scalars, swanlab_scalars, wandb_scalars

for package in ("wandb", "swanlab", "mlflow"):
    pytest.importorskip(package, reason="pip install -e '.[monitors]'")


@pytest.fixture
def offline(monkeypatch, tmp_path):
    for key in ("WANDB_MODE", "WANDB_API_KEY", "SWANLAB_MODE", "SWANLAB_API_KEY", "SWANLAB_LOG_DIR",
                "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # wandb's scratch folders
    monkeypatch.chdir(tmp_path)  # swanlab reads a .env of the working folder


def test_each_tracker_holds_the_runs_scalars(offline, tmp_path):
    from astuner.cli import main

    code = main(["--conf", str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml"), "--exp-dir",
                 str(tmp_path), f"astuner.model.path={tmp_path}/model", "astuner.trainer_common.total_training_steps=3",
                 "astuner.trainer_common.save_freq=-1", "astuner.trainer_common.test_freq=-1",
                 "astuner.trainer_common.logger=[console,tensorboard,wandb,swanlab,mlflow]"])
    assert code == 0
    run = tmp_path / "tiny_cpu"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    expected = {key: [(r["step"], r[key]) for r in rows if r.get(key) is not None]
                for key in ("reward/mean", "rollout/error_rate", "perf/time_step_s")}
    assert [s for s, _ in expected["reward/mean"]] == [1, 2, 3]
    found = {"wandb": wandb_scalars(run), "swanlab": swanlab_scalars(run), "mlflow": mlflow_scalars(run, "tiny_cpu")}
    for tracker, scalars in found.items():
        for key, series in expected.items():
            got = [(s, v) for s, v in scalars.get(key, []) if s in dict(series)]
            assert [s for s, _ in got] == [s for s, _ in series], (tracker, key, scalars.get(key))
            assert [v for _, v in got] == pytest.approx([v for _, v in series], rel=1e-6), (tracker, key)
    assert list(run.glob("tensorboard/events.out.tfevents.*"))


def test_unknown_or_missing_tracker_is_one_clear_error(capsys, tmp_path, monkeypatch):
    from astuner.cli import main

    conf = str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml")
    assert main(["--conf", conf, "--dry-run", "astuner.trainer_common.logger=[console,wandbb]"]) == 2
    assert "did you mean 'wandb'" in capsys.readouterr().err
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    assert main(["--conf", conf, "--dry-run", "astuner.trainer_common.logger=[console,mlflow]"]) == 2
    assert "pip install 'astuner[monitors]'" in capsys.readouterr().err
