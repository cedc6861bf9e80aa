"""A debug step's records: its metric row's train/ and perf/ values, its trajectories and token records (for the
trajectory viewer), and its one log line."""

from __future__ import annotations

import statistics
from typing import Any

from astuner.records.metrics import write_trajectories
from astuner.records.tokens import TokenPieces, token_record, write_token_records
from astuner.rollout.manager import RolloutBatch
from astuner.backbone.debug.trajectories import episode_row


def step_metrics(epoch: int, tasks: int, trained: list[Any], dropped_groups: int, rollout_s: float, update_s: float,
                 sync_s: float, step_s: float) -> dict[str, float]:
    """The step's train/ and perf/ values: what was trained on, and where the step's time went."""
    lengths = [sum(s.loss_mask) for s in trained] or [0]
    return {
        "train/epoch": float(epoch),
        "train/tasks": float(tasks),
        "train/samples": float(len(trained)),
        "train/dropped_groups": float(dropped_groups),
        "train/response_length_mean": statistics.fmean(lengths),
        "train/response_length_max": float(max(lengths)),
        "perf/time_rollout_s": rollout_s,
        "perf/time_update_s": update_s,
        "perf/time_weight_sync_s": sync_s,
        "perf/time_step_s": step_s,
        "perf/train_tokens_per_s": sum(lengths) / update_s if update_s > 0 else 0.0,
    }


def write_step_trajectories(folder: Any, step: int, batch: RolloutBatch, limit: int, pieces: TokenPieces) -> None:
    rows = [episode_row(e) for e in batch.episodes[:limit]]
    write_trajectories(folder, step, rows)
    # token by token, for the trajectory viewer: what each sample's tokens read as, which were trained, the
    # engine's and the trainer's log-probs, the advantage (gzip: the prompts repeat from sample to sample)
    write_token_records(folder, step, [token_record(e.episode_uuid, k, s, pieces) for e in batch.episodes[:limit]
                                       for k, s in enumerate(e.samples)])


def step_line(step: int, total: int, m: dict[str, float], policies: Any) -> str:
    parts = [f"step {step}/{total}", f"reward {m['reward/mean']:.3f}", f"success {m['reward/success_rate']:.2f}"]
    if "actor/pg_loss" in m:
        parts += [f"pg_loss {m['actor/pg_loss']:+.4f}", f"grad_norm {m.get('actor/grad_norm', 0):.3f}"]
    if "actor/kl" in m:
        parts.append(f"kl {m['actor/kl']:.4f}")
    parts += [f"errors {m['rollout/error_rate']:.2f}"]
    if m.get("rollout/madness_rate"):  # episodes given the madness reward (rollout.agent_madness_reward)
        parts.append(f"madness {m['rollout/madness_rate']:.2f}")
    parts.append(f"{m['perf/time_step_s']:.1f}s")
    if "val/reward_mean" in m:
        parts.append(f"val {m['val/reward_mean']:.3f}")
    for name in policies:
        if f"policy/{name}/reward/mean" in m:
            parts.append(f"{name} {m[f'policy/{name}/reward/mean']:.3f}")
    return " | ".join(parts)
