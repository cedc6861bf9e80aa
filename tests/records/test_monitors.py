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
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # reading the run's file store back (mlflow ≥ 3)
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

    # its own run folder and model: the tutorial's, launcher_record/tiny_cpu/, is the user's
    conf = ["--conf", str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml"), "--exp-dir", str(tmp_path),
            f"astuner.model.path={tmp_path}/model", "--dry-run"]
    assert main([*conf, "astuner.trainer_common.logger=[console,wandbb]"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'wandb'" in err and len(err.strip().splitlines()) == 1, err
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    assert main([*conf, "astuner.trainer_common.logger=[console,mlflow]"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'astuner[monitors]'" in err and len(err.strip().splitlines()) == 1, err


def test_trackers_hold_the_last_step_when_the_run_is_terminated(offline, tmp_path):
    """SIGTERM winds a debug run down (exit 143): wandb and swanlab (which keep a step in memory until the next
    one or their finish), mlflow and tensorboard hold every step metrics.jsonl holds, read from their own files."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "astuner", "--conf", str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml"),
         "--exp-dir", str(tmp_path), f"astuner.model.path={tmp_path}/model", "astuner.trainer_common.save_freq=-1",
         "astuner.trainer_common.test_freq=-1", "astuner.trainer_common.total_training_steps=100000",
         "astuner.trainer_common.logger=[console,tensorboard,wandb,swanlab,mlflow]"],
        cwd=tmp_path, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "tiny_cpu"
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 4):  # step 0 (validation), then 3
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "terminated (SIGTERM)" in err.strip().splitlines()[-1], err[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [row["step"] for row in rows if row.get("reward/mean") is not None]
    assert len(steps) >= 3 and steps == list(range(1, len(steps) + 1))
    found = {"wandb": wandb_scalars(run), "swanlab": swanlab_scalars(run), "mlflow": mlflow_scalars(run, "tiny_cpu")}
    for tracker, scalars in found.items():
        assert [s for s, _ in scalars["reward/mean"]] == steps, tracker
    from tests.helpers import scalars as tensorboard_scalars

    assert sorted(tensorboard_scalars(run / "tensorboard")["reward/mean"]) == steps


STOPPED_AT_ONCE = """
import sys
from pathlib import Path
from astuner.interrupts import stop_at_once
from astuner.records.metrics import MetricsWriter
from astuner.records.monitors import open_monitors

root = Path(sys.argv[1])
writer = MetricsWriter(root, root / "tensorboard", True, open_monitors(["wandb", "swanlab", "mlflow"], "p", "stopped",
                                                                       root, {}))
for step in (1, 2, 3):
    writer.write(step, {"reward/mean": step / 10})
stop_at_once()  # what a second Ctrl-C calls: os._exit, after the trackers' closers (up to GRACE_S)
"""


def test_a_second_ctrl_c_gives_the_trackers_their_last_step(offline, tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", STOPPED_AT_ONCE, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 130 and "interrupted twice" in proc.stderr, proc.stderr[-2000:]
    found = {"wandb": wandb_scalars(tmp_path), "swanlab": swanlab_scalars(tmp_path),
             "mlflow": mlflow_scalars(tmp_path, "p")}
    for tracker, scalars in found.items():
        assert scalars["reward/mean"] == [(1, 0.1), (2, 0.2), (3, 0.3)], tracker


def test_signals_during_a_steps_records_are_handled_after_them():
    """The race the SIGTERM test met in CI: a signal between metrics.jsonl and the trackers lost the step in
    the trackers. Held, it is handled (by the handler in place) once the records are whole."""
    import os
    import signal

    from astuner.interrupts import held_signals

    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append("handled"))
    try:
        with held_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            seen.append("records written")
        assert seen == ["records written", "handled"]
        with pytest.raises(KeyboardInterrupt):  # Python's default Ctrl-C, after the block
            signal.signal(signal.SIGINT, signal.default_int_handler)
            with held_signals():
                os.kill(os.getpid(), signal.SIGINT)
                seen.append("second records")
        assert seen[-1] == "second records"
    finally:
        signal.signal(signal.SIGTERM, previous)
