"""A run whose disk fills up stops with one line naming the disk and the path (exit 1), keeps every complete
checkpoint and leaves nothing half-written; after space is freed, --resume continues it. A run folder on a
read-only file system or under /proc is refused before launch (exit 2). The disk is a real small tmpfs where this
machine allows mounting one; elsewhere the same run goes through a write that fails as torch's does on a full disk."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_cli


def tiny_args(steps, exp_dir, *extra):
    return ["--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", "--exp-dir", str(exp_dir),
            f"astuner.trainer_common.total_training_steps={steps}", "astuner.trainer_common.save_freq=1",
            "astuner.trainer_common.max_checkpoints_to_keep=1000", "astuner.data.train_batch_size=4",
            "astuner.rollout.num_repeat=4", "astuner.trainer_common.test_freq=-1", *extra]


def _mount(folder: Path, size: str, *options: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(folder)],
                          capture_output=True)
    return done.returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MiB file system (None where this machine cannot mount one)."""
    folder = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    if not _mount(folder, "20M"):
        yield None
        return
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _simulate_full_disk(monkeypatch, after_saves: int):
    """Without a mountable disk: the checkpoint's torch.save fails as torch reports a full disk (a RuntimeError
    with no OSError in it) from the given save on, and the disk then has no byte free."""
    import torch

    from astuner.records import storage

    calls = {"n": 0}
    real_save, real_free = torch.save, storage.free_bytes

    def save(obj, f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > after_saves:
            Path(f).write_bytes(b"\0" * 100)
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 611392 vs 611284")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(storage, "free_bytes", lambda folder: 0 if calls["n"] > after_saves else real_free(folder))


def test_a_full_disk_stops_the_run_in_one_line_keeping_every_complete_checkpoint(project, small_disk, capsys,
                                                                                   monkeypatch):
    exp = small_disk if small_disk is not None else project / "runs"
    if small_disk is None:
        _simulate_full_disk(monkeypatch, after_saves=5)
    code, _, err = run_cli(tiny_args(400, exp), capsys)
    lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
    assert code == 1, err[-3000:]
    assert len(lines) == 1 and "the run stopped: checkpoint global_step_" in lines[0]
    assert "no space left on the device writing" in lines[0] and "tiny_cpu/checkpoints" in lines[0]
    assert "continue with --resume" in lines[0] and "internal failure" not in err and "Traceback" not in err
    root = exp / "tiny_cpu"
    checkpoints = sorted((int(p.name.split("_")[-1]), p) for p in (root / "checkpoints").iterdir())
    assert checkpoints and all((p / "COMPLETE").exists() for _, p in checkpoints)  # nothing half-written
    assert [s for s, _ in checkpoints] == list(range(1, len(checkpoints) + 1))
    assert not list(root.rglob("*.partial"))
    last = checkpoints[-1][0]

    # space freed: the run continues from its newest checkpoint
    for p in (root / "checkpoints").iterdir():
        if int(p.name.split("_")[-1]) < last:
            subprocess.run(["rm", "-rf", str(p)])
    monkeypatch.undo()
    monkeypatch.chdir(project)
    code, _, err = run_cli(tiny_args(last + 2, exp, "astuner.trainer_common.save_freq=100") + ["--resume"], capsys)
    assert code == 0, err[-3000:]
    assert f"resumed from {root / 'checkpoints' / f'global_step_{last}'}" in err
    steps = [json.loads(line)["step"] for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [s for s in steps if s > 0] == list(range(1, last + 3))  # (row 0: the validation before training)


@pytest.mark.parametrize("where", ["/proc/astuner-runs", "/sys/astuner-runs", "READONLY"])
def test_a_run_folder_that_cannot_be_made_is_refused_before_launch(project, tmp_path, capsys, where):
    if where == "READONLY":
        where = tmp_path / "ro"
        if not _mount(where, "1M", "ro"):
            pytest.skip("no read-only file system can be mounted on this machine (/proc and /sys are checked)")
    try:
        for dry in ([], ["--dry-run"]):
            code, _, err = run_cli(tiny_args(2, f"{where}/runs", *dry), capsys)
            assert code == 2, err[-2000:]
            assert len(err.strip().splitlines()) == 1 and "no run folder can be made in" in err, err
    finally:
        if not str(where).startswith(("/proc", "/sys")):
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
