"""The debug backbone trains a multi-turn, tool-calling agent: the tool-using CPU example (a ReActAgent that
calls `add`, reads the result, answers), a tiny model warm-started on demonstrations, two steps with several
micro-batches, two PPO epochs of two mini-batches each, and a KL loss. Asserts on the samples, masks and
losses the run produced."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import REPO_ROOT, run_cli

CONF = REPO_ROOT / "tutorial" / "example_tool_cpu" / "calc_agent.yaml"


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory):
    sys.path.insert(0, str(CONF.parent))
    from warm_start import warm_start

    path = tmp_path_factory.mktemp("tool_debug") / "model"
    assert warm_start(path)["val_calls_per_episode"] >= 2
    return path


def test_debug_backbone_trains_the_tool_using_agent(warm_model, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO_ROOT)
    tc, al = "astuner.trainer_common", "astuner.trainer_common.algorithm"
    code, _, err = run_cli(["--conf", str(CONF), "--backbone", "debug", "--exp-dir", str(tmp_path),
                            f"astuner.model.path={warm_model}", "astuner.experiment_name=tool_debug",
                            "astuner.rollout.engine=hf", f"{tc}.device=cpu", f"{tc}.test_freq=-1",
                            f"{tc}.ppo_epochs=2", f"{tc}.mini_batch_num=2", f"{tc}.max_token_len_per_micro_batch=900",
                            f"{al}.use_kl_loss=true", f"{al}.kl_loss_coef=0.1", f"{al}.entropy_coeff=0.01",
                            f"{al}.drop_zero_variance_groups=false", f"{tc}.optim.lr=1e-3"], capsys)
    assert code == 0, err
    root = tmp_path / "tool_debug"
    rows = {r["step"]: r for r in map(json.loads, (root / "metrics.jsonl").read_text().splitlines())}
    assert set(rows) == {1, 2}
    assert rows[1]["rollout/calls_per_episode"] >= 1.5  # the warm-started agent calls the tool, then answers (mostly)
    for step in (1, 2):  # (after the first update, lr 1e-3 and an entropy bonus, it may stop calling: not asserted)
        m = rows[step]
        assert m["rollout/calls_per_episode"] >= 1.0
        assert m["rollout/merge_ratio"] == 1.0 and m["rollout/samples_per_episode"] == 1.0  # one sample each
        assert m["actor/micro_batches"] > 2 * 2  # 2 epochs × 2 mini-batches, each in several micro-batches
        assert m["actor/grad_norm"] > 0
    assert rows[1]["actor/optimizer_steps"] == 4 and rows[2]["actor/optimizer_steps"] == 8
    # KL to the initial weights: 0 on the first mini-batch, positive once the policy moved
    assert rows[1]["actor/kl"] > 0 and rows[2]["actor/kl"] > 0

    episodes = [json.loads(line) for line in (root / "trajectories" / "step_1.jsonl").read_text().splitlines()]
    assert len(episodes) == 8  # 4 tasks × 2 episodes
    multi = [e for e in episodes if e["calls"] >= 2]
    assert len(multi) >= 6
    for e in multi:
        assert len(e["samples"]) == 1
        (sample,) = e["samples"]
        assert sample["num_calls"] == e["calls"]
        # generated tokens are trained, the tool's result between the calls is in the response but masked
        assert 0 < sample["trained_tokens"] < sample["response_tokens"]
        assert sample["trained_tokens"] == e["response_tokens"]
        assert any(m.get("role") == "tool" or "tool_response" in str(m.get("content")) for m in e["messages"])
