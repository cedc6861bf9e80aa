"""Training from a trace store (trainer_common.traces) on the main job's config: the weights change only through
the chosen episodes — a store holding the chosen episodes and others (unrewarded, below min_reward, a re-render
mismatch; for pg also an imported log without log-probs and a reply sampled at another temperature) trains to
exactly the weights of a store holding the chosen ones alone, and to other weights than the model's. Which episode
of a task best_per_task keeps, min_reward's bound, and pg's weight: the recorded log-probs, capped at is_cap."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace

import pytest

from astuner.records.trace_store import TraceStore
from tests.conftest import REPO_ROOT, run_cli

CONF = REPO_ROOT / "tutorial" / "example_agent_cpu" / "sensor_agent.yaml"
TOOLS = json.loads((REPO_ROOT / "tutorial" / "example_agent_cpu" / "tools.json").read_text())


class ScoredEngine:
    """The sensor agent's two replies (the tool call, then the reading's answer), token ids as the tokenizer gives
    them, each with its log-prob under the tiny model at the call's temperature (as an engine reports them): what
    a served model's episodes hold, deterministic, and re-rendering to their own tokens."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer

    async def generate(self, prompt_ids, sampling):
        import torch

        from astuner.model.engines.base import GenerateResult

        prompt = self.tokenizer.decode(prompt_ids)
        reading = re.findall(r"<tool_response>\s*(\d+)", prompt)
        text = f"\\boxed{{{reading[-1]}}}" if reading else \
            '<tool_call>\n{"name": "read_sensor", "arguments": {}}\n</tool_call>'
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt_ids + ids])).logits[0, len(prompt_ids) - 1:-1]
        logprobs = torch.log_softmax(logits / sampling.temperature, -1).gather(-1, torch.tensor(ids)[:, None])
        return GenerateResult(ids, logprobs.squeeze(-1).tolist(), "stop")

    async def update_weights(self, state_dict):
        return None


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """The main job's tiny model (created as the config creates it) and 8 episodes of the sensor agent: the tool
    call, the tool's result, the answer; recorded by ModelTuner as astuner serve records them."""
    from transformers import AutoModelForCausalLM

    from astuner.config import load_run_config
    from astuner.model.engines.base import SamplingParams
    from astuner.model.engines.factory import load_tokenizer
    from astuner.model.model_path import resolve_model_path
    from astuner.model.model_tuner import ModelTuner

    root = tmp_path_factory.mktemp("traces_training")
    model = root / "model"
    config = load_run_config(CONF, [f"astuner.model.path={model}"])
    resolve_model_path(config.astuner, config.extra_roots)  # the tiny model, as the run would create it
    tokenizer = load_tokenizer(str(model))
    engine = ScoredEngine(AutoModelForCausalLM.from_pretrained(model).eval(), tokenizer)

    async def play(n: int, temperature: float):
        tuner = ModelTuner(engine, tokenizer, SamplingParams(temperature, 1.0, 24), 1024)
        messages = [{"role": "system", "content": "Call read_sensor, then answer in \\boxed{}."},
                    {"role": "user", "content": f"What does sensor S{100 + n} read?"}]
        for _ in range(2):
            done = await tuner.complete(tuner.prepare(messages, TOOLS))
            tuner.recorder.add(done.record)
            calls = [{"id": "c1", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                     for c in done.parsed.tool_calls]
            messages = messages + [{"role": "assistant", "content": done.parsed.text, "tool_calls": calls},
                                   {"role": "tool", "tool_call_id": "c1", "content": str(400 + n)}]
        return tuner.recorder.calls

    episodes = [asyncio.run(play(n, 0.5 if n == 7 else 1.0)) for n in range(8)]
    return {"root": root, "model": model, "episodes": episodes}


def store_of(path, episodes):
    """A store of (id, calls, reward or None) in this order."""
    store = TraceStore.open_for_writing(path)
    for episode, calls, reward in episodes:
        for call in calls:
            store.add_call(episode, call)
        if reward is not None:
            store.add_feedback(episode, reward)
    store.close()
    return path


def mismatched(calls):
    """The second call's prompt with one token changed: its messages no longer render to its tokens."""
    second = calls[1]
    ids = list(second.prompt_ids)
    ids[-3] = (ids[-3] + 1) % 100
    return [calls[0], replace(second, prompt_ids=ids)]


def trained(played, store, name, capsys, *overrides):
    code, out, err = run_cli(["--conf", str(CONF), "--exp-dir", str(played["root"] / "runs"),
                              f"astuner.experiment_name={name}", f"astuner.model.path={played['model']}",
                              "astuner.trainer_common.sft.steps=0", f"astuner.trainer_common.traces.store={store}",
                              "astuner.trainer_common.traces.steps=6", "astuner.trainer_common.traces.batch_size=4",
                              "astuner.rollout.val_kwargs.num_repeat=1", *overrides], capsys)
    assert code == 0, err[-3000:]
    run = played["root"] / "runs" / name
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0]  # the run is its training from the store (then_rl false)
    return weights(run / "checkpoints" / "global_step_0" / "model"), rows[0], err


def trained_as_chosen_alone(played, tmp_path, name, mixed, chosen, capsys, *overrides):
    """Trained from a store of `mixed` episodes and from one of `chosen` alone: the same weights, not the model's;
    the mixed run's metric row 0 and log."""
    from_mixed, row, err = trained(played, store_of(tmp_path / "mixed.db", mixed), f"{name}_mixed", capsys,
                                   *overrides)
    from_alone, _, _ = trained(played, store_of(tmp_path / "alone.db", chosen), f"{name}_alone", capsys, *overrides)
    assert same(from_mixed, from_alone)
    assert not same(from_mixed, weights(played["model"]))
    return row, err


def weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def same(a, b) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_sft_from_the_store_trains_only_the_chosen_episodes(played, tmp_path, capsys):
    e = played["episodes"]
    chosen = [("good-1", e[0], 1.0), ("good-2", e[1], 0.8), ("good-3", e[2], 1.0)]
    others = [("unrated", e[3], None), ("poor", e[4], 0.1), ("drifted", mismatched(e[5]), 1.0)]
    mixed = [chosen[0], others[0], chosen[1], others[1], others[2], chosen[2]]
    sft = ["astuner.trainer_common.traces.mode=sft", "astuner.trainer_common.traces.min_reward=0.5"]
    row, err = trained_as_chosen_alone(played, tmp_path, "sft", mixed, chosen, capsys, *sft)
    assert row["traces/episodes"] == 3 and row["traces/reward_mean"] == pytest.approx((1.0 + 0.8 + 1.0) / 3)
    assert (row["traces/left_out/unrewarded"], row["traces/left_out/below_min_reward"],
            row["traces/left_out/mismatched"]) == (1, 1, 1)
    assert row["traces/loss_last"] < row["traces/loss_first"] and "traces/val_reward_before" in row
    assert "val/reward_mean" in row  # validated after it
    assert "3 episodes chosen" in err and "left out: below_min_reward 1, mismatched 1, unrewarded 1" in err

    # best_per_task: of the episodes of one task (the same first user message) only the best is trained
    twin = [("twin-low", e[0], 0.6), ("twin-high", e[0], 0.9)]
    best, row, _ = trained(played, store_of(tmp_path / "twins.db", twin + [chosen[1]]), "sft_best", capsys, *sft,
                           "astuner.trainer_common.traces.best_per_task=true")
    assert row["traces/episodes"] == 2 and row["traces/left_out/not_best_of_task"] == 1


def test_pg_from_the_store_trains_only_the_chosen_episodes(played, tmp_path, capsys):
    e = played["episodes"]
    chosen = [("r1", e[0], 1.0), ("r0", e[1], 0.0), ("r05", e[2], 0.5), ("r1b", e[3], 1.0)]
    imported = [replace(c, logprobs=[], sampling={}) for c in e[4]]  # a chat log: no behaviour log-probs
    others = [("unrated", e[5], None), ("imported", imported, 1.0), ("cooler", e[7], 1.0),
              ("drifted", mismatched(e[6]), 0.0)]
    mixed = [others[0], chosen[0], others[1], chosen[1], others[2], chosen[2], others[3], chosen[3]]
    pg = ["astuner.trainer_common.traces.mode=pg", "astuner.trainer_common.algorithm.drop_zero_variance_groups=false"]
    row, _ = trained_as_chosen_alone(played, tmp_path, "pg", mixed, chosen, capsys, *pg)
    assert row["traces/episodes"] == 4 and row["traces/updates"] == 6
    assert (row["traces/left_out/unrewarded"], row["traces/left_out/no_logprobs"],
            row["traces/left_out/other_temperature"], row["traces/left_out/mismatched"]) == (1, 1, 1, 1)


def test_the_store_is_checked_before_the_run_and_refused_on_the_distributed_backbones(played, tmp_path, capsys):
    base = ["--conf", str(CONF), "--exp-dir", str(tmp_path / "runs"), f"astuner.model.path={played['model']}"]
    code, out, err = run_cli([*base, f"astuner.trainer_common.traces.store={tmp_path / 'none.db'}"], capsys)
    assert code == 2 and "astuner.trainer_common.traces.store" in err and "not found" in err
    assert not (tmp_path / "runs").exists()
    (tmp_path / "notes.db").write_text("not a store")
    code, out, err = run_cli([*base, f"astuner.trainer_common.traces.store={tmp_path / 'notes.db'}"], capsys)
    assert code == 2 and "not a trace store" in err
    store = store_of(tmp_path / "t.db", [("a", played["episodes"][0], 1.0)])
    code, out, err = run_cli([*base, f"astuner.trainer_common.traces.store={store}", "--dry-run"], capsys)
    assert code == 0 and "traces: " in err and "(1 episodes, 1 with a reward)" in err
    for backbone in ("verl", "trinity"):
        code, out, err = run_cli([*base, f"astuner.trainer_common.traces.store={store}", "--dry-run",
                                  f"--backbone={backbone}"], capsys)
        assert code == 2 and "training from a trace store runs on the debug backbone" in err, err[-1500:]
    # a store with nothing to train on: refused at --dry-run, before a run folder exists (not after a validation)
    empty = TraceStore.open_for_writing(tmp_path / "empty.db")
    empty.close()
    unrated = store_of(tmp_path / "unrated.db", [("a", played["episodes"][0], None)])
    for path, needle in [(tmp_path / "empty.db", "empty.db holds no episode; nothing to train on"),
                         (unrated, "unrated.db holds 1 episodes, none with a reward (rate them: POST /v1/feedback"),
                         (store, "holds 1 rewarded episodes, none at or above traces.min_reward 2")]:
        code, out, err = run_cli([*base, f"astuner.trainer_common.traces.store={path}", "--dry-run",
                                  "astuner.trainer_common.traces.min_reward=2"], capsys)
        lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
        assert code == 2 and len(lines) == 1 and needle in lines[0], err[-1500:]
    code, out, err = run_cli([*base, f"astuner.trainer_common.traces.store={store}", "--dry-run",
                              "astuner.trainer_common.traces.min_reward=1"], capsys)  # rewarded 1: at min_reward
    assert code == 0, err[-1500:]
    # pg learns from behaviour log-probs, which an imported episode has not
    imported = TraceStore.open_for_writing(tmp_path / "imported.db")
    imported.add_episode("i", played["episodes"][0], "imported:openai", 1.0).result(timeout=60)
    imported.close()
    code, out, err = run_cli([*base, f"astuner.trainer_common.traces.store={tmp_path / 'imported.db'}", "--dry-run",
                              "astuner.trainer_common.traces.mode=pg"], capsys)
    assert code == 2 and "holds 1 rewarded episodes, none served: traces.mode pg learns from the behaviour" in err, \
        err[-1500:]
    assert not (tmp_path / "runs").exists()


def chosen_from(played, path, *overrides):
    """traces.choose on the store at `path` with the main job's config and these overrides."""
    from astuner.backbone.debug import traces
    from astuner.config import load_run_config
    from astuner.model.engines.factory import load_tokenizer

    config = load_run_config(CONF, [f"astuner.model.path={played['model']}", *overrides])
    return traces.choose(path, config.astuner, load_tokenizer(str(played["model"])))


def test_best_per_task_keeps_the_highest_rewarded_episode_of_each_task(played, tmp_path):
    """best_per_task: of a task's episodes the one with the highest reward is trained, wherever it lies in the
    store (not the first, the last or the worst of them); another task's episode is kept beside it."""
    e = played["episodes"]
    one_task = [("mid", e[0], 0.6), ("best", e[0], 0.9), ("worst", e[0], 0.3)]  # one first user message
    store = store_of(tmp_path / "tasks.db", one_task + [("other-task", e[1], 0.2)])
    chosen = chosen_from(played, store, "astuner.trainer_common.traces.best_per_task=true")
    assert chosen.rewards == {"best": 0.9, "other-task": 0.2}
    assert chosen.left_out["not_best_of_task"] == 2


def test_min_reward_keeps_the_episodes_rewarded_at_least_it(played, tmp_path):
    """min_reward: an episode rewarded exactly min_reward or above is trained, one below it is left out."""
    e = played["episodes"]
    store = store_of(tmp_path / "rewards.db", [("above", e[0], 0.9), ("at", e[1], 0.5), ("below", e[2], 0.49)])
    chosen = chosen_from(played, store, "astuner.trainer_common.traces.min_reward=0.5")
    assert chosen.rewards == {"above": 0.9, "at": 0.5}
    assert chosen.left_out["below_min_reward"] == 1


def test_pg_weighs_each_token_by_the_recorded_log_probs_capped_at_is_cap(played, tmp_path, capsys):
    """pg: the behaviour policy is the recorded log-probs, each token's loss weighed by pi / pi_behaviour capped at
    off_policy.is_cap. One update (one mini-batch: the ratio to the learner's weights before it is 1, so the
    loss is -advantage x weight per token) on a rewarded full episode and a worse one-call episode: recorded
    log-probs log 2 below the learner's double the loss of the same episodes recorded as the learner scores
    them; log 4 below with is_cap 2 double it too (the ratio 4 capped at 2), not quadruple it."""
    import math

    e = played["episodes"]

    def pg_loss(name, shift, is_cap):
        def lowered(calls):
            return [replace(c, logprobs=[lp - shift for lp in c.logprobs]) for c in calls]

        store = store_of(tmp_path / f"{name}.db", [("good", lowered(e[0]), 1.0), ("poor", lowered(e[1][:1]), 0.0)])
        _, row, _ = trained(played, store, f"pg_{name}", capsys, "astuner.trainer_common.traces.mode=pg",
                            "astuner.trainer_common.traces.steps=1", "astuner.trainer_common.mini_batch_num=1",
                            f"astuner.trainer_common.off_policy.is_cap={is_cap}")
        assert row["traces/updates"] == 1 and row["traces/episodes"] == 2
        return row["traces/pg_loss_first"]

    as_scored = pg_loss("as_scored", 0.0, 2.0)
    # the recorded log-probs are the behaviour policy: log 2 below the learner's weigh every token by 2
    assert pg_loss("half", math.log(2.0), 100.0) == pytest.approx(2 * as_scored, rel=1e-3)
    # the ratio is capped at is_cap: log 4 below weigh by 4, capped at 2
    assert pg_loss("quarter", math.log(4.0), 2.0) == pytest.approx(2 * as_scored, rel=1e-3)
    assert abs(as_scored) > 0.05  # not 2 x 0: the advantages' token-weighted sum is not zero, the weight shows
