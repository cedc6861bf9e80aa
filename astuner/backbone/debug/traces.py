"""Training from a trace store (`trainer_common.traces`): an experience source of the episodes an agent in use
played (`astuner serve`, `astuner traces import`), as the debug trainer's samples, token for token as recorded.

Which episodes: those with a reward; with `min_reward`, those at or above it; with `best_per_task`, the best of
each task (a task: the episode's first user message); and only those whose messages render again to the tokens
recorded (astuner.model.chat.rerender, its prompts only: each reply is trained as generated), unless
`allow_mismatch`. `pg` also needs the behaviour log-probs (served episodes have them, imported logs do not) and one
sampling temperature (the most common; the others are left out): the learner's ratio pi/pi_behaviour is of that
temperature. Each reason an episode is left out is counted.

What is trained: `sft` — the chosen episodes' generated tokens by cross-entropy (the warm start's trainer,
backbone/debug/sft.py); `pg` — `steps` updates of the learner, each on `batch_size` episodes drawn at random
(seeded), advantages the batch's rewards minus their mean over their std (one group), the recorded log-probs as
the behaviour policy (the clipped importance ratio, off_policy.is_cap).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from astuner.errors import DataError
from astuner.model.chat.rerender import check_episode
from astuner.records.trace_store import TraceStore
from astuner.rollout.tracker import build_samples
from astuner.schema import Sample

BATCH_GROUP = "traces"  # pg: a batch is one group (its rewards' mean and std are the baseline)


@dataclass
class ChosenTraces:
    episodes: dict[str, list[Sample]]  # episode id -> its samples (reward set)
    rewards: dict[str, float]
    left_out: Counter = field(default_factory=Counter)  # reason -> episodes
    temperature: Optional[float] = None  # pg: the behaviour policy's

    def metrics(self) -> dict[str, float]:
        out = {"traces/episodes": float(len(self.episodes)),
               "traces/samples": float(sum(len(s) for s in self.episodes.values())),
               "traces/reward_mean": sum(self.rewards.values()) / max(len(self.rewards), 1)}
        out.update({f"traces/left_out/{reason}": float(n) for reason, n in self.left_out.items()})
        return out


def task_of(calls: list[Any]) -> str:
    """An episode's task: its first user message."""
    first = next((m.get("content") for c in calls for m in c.messages if m.get("role") == "user"), "") or ""
    return "task-" + hashlib.sha1(str(first).encode("utf-8")).hexdigest()[:12]


def choose(path: str | Path, cfg: Any, tokenizer: Any) -> ChosenTraces:
    t = cfg.trainer_common.traces
    reader = TraceStore.read(Path(path))
    left_out: Counter = Counter()
    kept: list[tuple[dict[str, Any], list[Any], str]] = []
    for episode in reader.episodes():
        if episode["reward"] is None:
            left_out["unrewarded"] += 1
            continue
        if t.mode == "sft" and t.min_reward is not None and episode["reward"] < t.min_reward:
            left_out["below_min_reward"] += 1
            continue
        calls = reader.calls(episode["id"])
        if not calls:
            left_out["no_calls"] += 1
            continue
        # the prompts as the agent's framework renders its conversation; the replies are trained as generated
        # (their recorded ids), so a reply in other tokens than the tokenizer's leaves nothing out here
        if not t.allow_mismatch and not check_episode(tokenizer, episode["id"], calls, replies=False).passed:
            left_out["mismatched"] += 1
            continue
        if t.mode == "pg" and any(len(c.logprobs) != len(c.response_ids) or not c.sampling for c in calls):
            left_out["no_logprobs"] += 1
            continue
        kept.append((episode, calls, task_of(calls)))
    temperature = None
    if t.mode == "pg" and kept:
        counts = Counter(c.sampling["temperature"] for _, calls, _ in kept for c in calls)
        temperature = counts.most_common(1)[0][0]
        same = [k for k in kept if all(c.sampling["temperature"] == temperature for c in k[1])]
        left_out["other_temperature"] += len(kept) - len(same)
        kept = same
    if t.mode == "sft" and t.best_per_task:
        best: dict[str, tuple[dict[str, Any], list[Any], str]] = {}
        for item in kept:  # the first of equals
            if item[2] not in best or item[0]["reward"] > best[item[2]][0]["reward"]:
                best[item[2]] = item
        left_out["not_best_of_task"] += len(kept) - len(best)
        kept = [item for item in kept if best[item[2]] is item]
    chosen = ChosenTraces({}, {}, left_out, temperature)
    for episode, calls, task in kept:
        calls = [c if len(c.logprobs) == len(c.response_ids) else replace(c, logprobs=[0.0] * len(c.response_ids))
                 for c in calls]  # an imported log's calls have no log-probs (sft does not read them)
        samples = build_samples(calls, task_id=task, episode_uuid=episode["id"], repeat_index=0, max_samples=None,
                                max_prompt_length=cfg.data.max_prompt_length,
                                max_response_length=cfg.data.max_response_length)
        if not samples:
            left_out["too_long"] += 1
            continue
        for sample in samples:
            sample.reward = float(episode["reward"])
        chosen.episodes[episode["id"]] = samples
        chosen.rewards[episode["id"]] = float(episode["reward"])
    if not chosen.episodes:
        why = ", ".join(f"{reason} {n}" for reason, n in sorted(left_out.items())) or "the store holds none"
        raise DataError(f"astuner.trainer_common.traces.store {path}: no episode to train on ({why})")
    return chosen


class TraceSource:
    """pg: `batch_size` chosen episodes per step, drawn without replacement within a step (seeded), their samples
    as one group."""

    def __init__(self, chosen: ChosenTraces, batch_size: int, seed: int):
        self.chosen, self.batch_size = chosen, batch_size
        self.random = random.Random(seed)
        self.ids = sorted(chosen.episodes)

    def collect(self) -> list[Sample]:
        ids = self.random.sample(self.ids, min(self.batch_size, len(self.ids)))
        return [replace(s, task_id=BATCH_GROUP) for i in ids for s in self.chosen.episodes[i]]
