"""Acceptance: the contract's MathAgentWorkflow (tutorial/example_math_agent), a tiny local model behind
the batched hf engine, GSM8K rows, a group of episodes -> judged samples whose trained tokens are exactly
the engine's output."""

from __future__ import annotations

import asyncio

from astuner.config import load_run_config
from astuner.plugins import resolve_plugins
from astuner.model.engines.hf import HFEngine
from astuner.rollout.manager import RolloutManager, build_judge
from astuner.task_reader import build_task_reader
from tests.conftest import REPO_ROOT


class RecordingEngine:
    def __init__(self, inner):
        self.inner = inner
        self.outputs = []

    async def generate(self, prompt_ids, sampling):
        result = await self.inner.generate(prompt_ids, sampling)
        self.outputs.append(list(result.token_ids))
        return result

    async def update_weights(self, state_dict):
        await self.inner.update_weights(state_dict)


def test_math_agent_group_on_gsm8k_with_tiny_model(tiny_model_dir, tokenizer, gsm8k_dir, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    run = load_run_config(REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml", [
        f"astuner.task_reader.huggingface_dat_repo.dataset_path={gsm8k_dir}",
        f"astuner.model.path={tiny_model_dir}",
        "astuner.rollout.num_repeat=4", "astuner.rollout.max_response_length_in_one_turn=24",
        "astuner.rollout.max_model_len=4096", "astuner.data.max_prompt_length=2000",
        "astuner.data.max_response_length=2000"])
    plugins = resolve_plugins(run)
    tasks = build_task_reader(run.astuner, run.extra_roots).train_tasks()[:2]
    engine = RecordingEngine(HFEngine.from_pretrained(str(tiny_model_dir), tokenizer, max_num_seqs=8, seed=3))
    manager = RolloutManager(run.astuner, plugins.workflow, build_judge(plugins.judge, run.astuner), engine,
                             tokenizer)
    batch = asyncio.run(manager.run(tasks))

    assert len(batch.episodes) == 8 and list(batch.groups()) == [tasks[0].task_id, tasks[1].task_id]
    assert not any(e.failed for e in batch.episodes), [e.error for e in batch.episodes if e.failed]
    assert all(e.reward in (0.0, 1.0) for e in batch.episodes)  # judged (or madness-scored with reward 0.0)
    spans = [tuple(span) for s in batch.samples for span in s.trained_spans()]
    assert sorted(spans) == sorted(tuple(o) for o in engine.outputs if o)
    for sample in batch.samples:
        assert len(sample.loss_mask) == len(sample.logprobs) == len(sample.response_ids)
        assert sample.prompt_ids[:3] == tokenizer.encode("<|im_start|>system\n", add_special_tokens=False)[:3]
