"""The verl backbone in an environment with verl installed (CI's verl job): verl's own trainer config
accepts every key we emit, and our agent loop, run against a fake server manager, returns
AgentLoopOutputs with the engine's ids, correct masks, log-probs and our judge's reward for a multi-turn
episode with a tool call. Skipped where verl is absent."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.helpers import ScriptedEngine, prepare_seed_run  # noqa: E402

SEED = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"


@pytest.fixture
def prepared(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from astuner.backbone.verl import prepare

    monkeypatch.chdir(REPO_ROOT)
    return prepare_seed_run(prepare, tmp_path, tiny_model_dir, gsm8k_dir, ("+trainer.logger=[console]",))


def test_verl_accepts_every_translated_key(prepared):
    from omegaconf import OmegaConf

    run, root, path = prepared
    cfg = OmegaConf.load(path)
    rollout = cfg.actor_rollout_ref.rollout
    assert cfg.actor_rollout_ref.model.path == run.astuner.model.path
    assert (rollout.n, rollout.temperature, rollout.max_num_seqs, rollout.tensor_model_parallel_size) == (4, 0.7, 40, 1)
    assert rollout.max_model_len == 4096 and rollout.agent.default_agent_loop == "astuner_agent"
    assert cfg.trainer.default_local_dir == str(root / "checkpoints")
    assert list(cfg.trainer.logger) == ["console"]  # the user's top-level verl key won
    assert cfg.data.train_files == str(root / "verl_data" / "train.jsonl")
    rows = [json.loads(line) for line in (root / "verl_data" / "train.jsonl").read_text().splitlines()[:2]]
    assert rows[0]["agent_name"] == "astuner_agent" and rows[0]["prompt"][0]["role"] == "user"


def test_unknown_top_level_verl_key_is_a_config_error(prepared, tmp_path):
    from astuner.backbone.verl import compose_verl_config
    from astuner.errors import ConfigError

    with pytest.raises(ConfigError, match="no key"):
        compose_verl_config({"trainer": {"no_such_knob": 1}})


class FakeServerManager:
    def __init__(self, engine):
        self.engine = engine

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from astuner.rollout.engines.base import SamplingParams

        result = await self.engine.generate(prompt_ids, SamplingParams(sampling_params["temperature"],
                                                                       sampling_params["top_p"],
                                                                       sampling_params["max_tokens"]))
        return SimpleNamespace(token_ids=result.token_ids, log_probs=result.logprobs, stop_reason="completed")


def test_agent_loop_returns_exact_outputs_for_a_multi_turn_episode(prepared, tokenizer):
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap

    from astuner.backbone.verl_backbone.agent_loop import AstunerAgentLoop

    run, root, path = prepared
    cfg = OmegaConf.load(path)
    registry = OmegaConf.load(root / "verl_agent_loops.yaml")[0]
    replies = ['Let me compute.\n<tool_call>\n{"name": "execute_python_code", "arguments": {"code": "print(48 + 24)"}}'
               '\n</tool_call>', "So she sold \\boxed{72} clips."]
    engine = ScriptedEngine(tokenizer, replies)
    loop = AstunerAgentLoop(DictConfigWrap(cfg), FakeServerManager(engine), tokenizer, None, None,
                            DictConfigWrap(cfg.data), astuner_config=registry.astuner_config,
                            astuner_roots=list(registry.astuner_roots))
    row = json.loads((root / "verl_data" / "train.jsonl").read_text().splitlines()[0])
    out = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **row))
    assert isinstance(out, AgentLoopOutput)
    assert out.reward_score == 1.0 and out.num_turns == 4
    assert out.prompt_ids == engine.prompts[0]
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    generated = [t for t, m in zip(out.response_ids, out.response_mask) if m]
    assert generated == engine.outputs[0] + engine.outputs[1]
    given = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if not m])
    assert "<tool_response>" in given and "72" in given
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask) if not m)


def test_dry_run_prints_the_config_composed_with_verls_own(capsys, monkeypatch):
    import yaml

    from tests.conftest import run_cli

    monkeypatch.chdir(REPO_ROOT)
    code, out, _ = run_cli(["--conf", str(SEED), "--backbone", "verl", "--dry-run"], capsys)
    assert code == 0
    cfg = yaml.safe_load(out)
    assert cfg["actor_rollout_ref"]["rollout"]["max_num_seqs"] == 40  # ours
    assert "ppo_micro_batch_size_per_gpu" in cfg["actor_rollout_ref"]["actor"]  # verl's own default keys
    code, _, err = run_cli(["--conf", str(SEED), "--backbone", "verl", "--dry-run", "+trainer.bogus_key=1"], capsys)
    assert code == 2 and "bogus_key" in err
