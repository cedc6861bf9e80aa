"""The debug backbone's synchronous runs, metric row by metric row, against recorded rows (`sync_golden/`: first
written before its step was split into an experience source and a learner, by the trainer of commit 3e888ab; written
again, with the same code path, when each episode came to sample from a seed of its own instead of the engine's one
generator — torch 2.13.0 on x86-64): the one-policy demo, the same with LoRA, a KL penalty and two mini-batches, and
the multi-policy signal game with a frozen third policy. Everything but the timings (perf/...) must match; the
floats to 1e-5 relative, as CPU kernels of one torch version give them on any run of the same machine type."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_cli

GOLDEN = Path(__file__).with_name("sync_golden")
# metrics added since the rows were recorded (none since the last recording)
ADDED: tuple[str, ...] = ()
RUNS = {
    "tiny_cpu": ("tutorial/example_tiny_cpu/tiny_cpu.yaml", ["astuner.trainer_common.total_training_steps=4"]),
    "tiny_lora_kl": ("tutorial/example_tiny_cpu/tiny_cpu.yaml", [
        "astuner.experiment_name=tiny_lora_kl", "astuner.trainer_common.total_training_steps=4", "astuner.model.lora={}",
        "astuner.trainer_common.algorithm.use_kl_loss=true", "astuner.trainer_common.mini_batch_num=2",
        "astuner.trainer_common.optim.lr=1e-2"]),
    "signal_game": ("tutorial/example_multi_agent_cpu/signal_game.yaml",
                    ["astuner.trainer_common.total_training_steps=3"]),
}


def rows(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("perf/")}
            for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_synchronous_run_is_the_recorded_run_row_by_row(name, tmp_path, capsys, monkeypatch):
    import torch

    if not torch.__version__.startswith("2.13.0"):
        pytest.skip(f"the rows were recorded with torch 2.13.0 (this is {torch.__version__})")
    conf, extra = RUNS[name]
    monkeypatch.chdir(REPO_ROOT)
    code, _, err = run_cli(["--conf", conf, "--exp-dir", str(tmp_path), f"astuner.model.path={tmp_path / 'model'}",
                            "astuner.trainer_common.test_freq=2", "astuner.trainer_common.save_freq=2", *extra], capsys)
    assert code == 0, err
    got, want = rows(tmp_path / name / "metrics.jsonl"), rows(GOLDEN / f"{name}.jsonl")
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want):
        added = {k: g.pop(k) for k in ADDED if k in g}  # counters since the recording: nothing to count in these runs
        assert all(v == 0.0 for v in added.values()), (g["step"], added)
        assert sorted(g) == sorted(w), (g["step"], set(g) ^ set(w))
        off = {k: (g[k], w[k]) for k in w if not math.isclose(g[k], w[k], rel_tol=1e-5, abs_tol=1e-7)}
        assert not off, (g["step"], off)
