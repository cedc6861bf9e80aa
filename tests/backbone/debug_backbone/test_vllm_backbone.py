"""The debug backbone with the in-process vLLM engine (weights synced each step, resume). Runs only where
vllm is installed: `pytest -m vllm tests/backbone/debug_backbone/test_vllm_backbone.py`."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import needs

# not among the files .ci/backbones runs
needs("vllm", "; then .venv-verl/bin/python -m pytest tests/backbone/debug_backbone/test_vllm_backbone.py")
pytestmark = pytest.mark.vllm

from tests.conftest import REPO_ROOT, run_cli  # noqa: E402


def test_tiny_demo_with_vllm_engine_and_resume(tmp_path, monkeypatch, capsys):
    shutil.copytree(REPO_ROOT / "tutorial" / "example_tiny_cpu", tmp_path / "tutorial" / "example_tiny_cpu")
    monkeypatch.chdir(tmp_path)
    base = ["--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", "astuner.model.tiny.hidden_size=128",
            "+astuner.model.tiny.heads=2", "astuner.rollout.engine=vllm", "astuner.rollout.gpu_memory_utilization=0.3",
            "astuner.trainer_common.save_freq=2", "astuner.trainer_common.test_freq=2",
            "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"]
    assert run_cli(base + ["astuner.trainer_common.total_training_steps=2"], capsys)[0] == 0
    code, _, err = run_cli(base + ["astuner.trainer_common.total_training_steps=4", "--resume"], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "launcher_record" / "tiny_cpu" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    diffs = [r["actor/rollout_logprob_diff"] for r in rows if r.get("actor/rollout_logprob_diff") is not None]
    assert diffs and max(diffs) < 0.02  # vLLM's log-probs agree with the trainer's after every weight sync
