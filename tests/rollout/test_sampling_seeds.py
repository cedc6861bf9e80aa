"""Each episode samples from a seed of its own (the run's seed and its id; each call from that and its index): the
same weights give the same episodes whatever the engine batches them with, in which order the episodes reach it,
and whatever it sampled before — so a validation is reproducible across runs, threads and backbones' schedules."""

from __future__ import annotations

import asyncio
import random

from astuner import Task, Workflow, WorkflowOutput
from astuner.model.engines.hf import HFEngine, pad_id_of, stop_token_ids_of
from astuner.rollout.manager import RolloutManager
from tests.helpers import rollout_config


class TwoCalls(Workflow):
    """Two model calls with a pause of its own between them: which calls meet in a batch varies with the pauses."""

    pauses = random.Random(0)

    async def execute(self, workflow_task, model_tuner):
        messages = [{"role": "user", "content": workflow_task.task.main_query}]
        first = await model_tuner(messages)
        await asyncio.sleep(TwoCalls.pauses.random() * 0.02)
        text = "".join(b.get("text", "") for b in first.content if b["type"] == "text")
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "and then?"}]
        await model_tuner(messages)
        return WorkflowOutput(reward=0.0)


def episodes(batch):
    return {(e.task.task_id, e.repeat_index): [c.response_ids for c in e.recorder.calls] for e in batch.episodes}


def test_the_same_weights_sample_the_same_episodes_whatever_the_batching(tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tasks = [Task(task_id=f"t{i}", main_query=f"what does sensor {i} read?") for i in range(4)]
    cfg = rollout_config(num_repeat=3, max_env_worker=12, max_response_length_in_one_turn=12)
    cfg.rollout.val_kwargs.num_repeat, cfg.rollout.val_kwargs.temperature = 3, 1.0

    def validate(max_num_seqs, engine_seed, pauses, tag="run:val:10"):
        engine = HFEngine(model, stop_token_ids_of(tokenizer, model), pad_id_of(tokenizer), max_num_seqs, seed=engine_seed)
        TwoCalls.pauses = random.Random(pauses)
        return episodes(asyncio.run(RolloutManager(cfg, TwoCalls, None, engine, tokenizer).run(tasks, "val", tag=tag)))

    batched = validate(64, engine_seed=0, pauses=1)
    assert all(len(calls) == 2 and all(calls) for calls in batched.values())
    assert validate(1, engine_seed=5, pauses=2) == batched  # one call at a time, another engine seed and timing
    assert validate(5, engine_seed=9, pauses=3) == batched
    other = validate(64, engine_seed=0, pauses=1, tag="run:val:20")  # other episodes: other seeds
    assert sum(other[key] != batched[key] for key in batched) >= len(batched) // 2
    cfg.rollout.seed = 1  # the run's seed is in each episode's
    reseeded = validate(64, engine_seed=0, pauses=1)
    assert sum(reseeded[key] != batched[key] for key in batched) >= len(batched) // 2


def test_each_call_of_an_episode_has_a_seed_of_its_own(tokenizer):
    """Calls draw from seeds derived from the episode's and their index: two calls of an episode never share their
    draws, and the n-th call of an episode has the same seed in every run; no seed, no seed (the engine's draws)."""
    from astuner.model.engines.base import SamplingParams, derived_seed
    from astuner.model.model_tuner import ModelTuner
    from astuner.schema.calls import EpisodeRecorder

    def seeds(episode_seed, n=3):
        tuner = ModelTuner(None, tokenizer, SamplingParams(1.0, 1.0, 8, seed=episode_seed), 4096, EpisodeRecorder())
        return [tuner.prepare([{"role": "user", "content": f"call {i}"}]).sampling.seed for i in range(n)]

    first = seeds(11)
    assert first == seeds(11) == [derived_seed(11, i) for i in range(3)] and len(set(first)) == 3
    assert not set(first) & set(seeds(12))
    assert seeds(None) == [None] * 3
