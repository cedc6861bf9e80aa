"""What each backbone can do, declared once.

A feature is something a config asks for with one key (`FEATURES`). Each backbone's object declares `refuses`:
feature -> the reason it cannot offer it; a feature it does not name, it offers. `refusals(config, backbone)` turns
the features a config uses that its backbone refuses into one `ConfigError` each, naming the key, the reason and
the backbones that do offer it: the preflight adds them before anything is written (a run, `--dry-run` and
`tune()` alike), so no refusal comes after the run folder exists. `table()` renders the backbone × feature table
of docs/distributed.md from the same declarations (`python -m astuner.backbone.capabilities` prints it; a test
keeps the page equal to it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from astuner.backbone import BACKBONES, get_backbone
from astuner.errors import ConfigError

ORDERED = ("sequential", "shuffle")  # the task orders every backbone's sampler gives


def _schedule(a: Any) -> Any:
    from astuner.config.sync_schedule import SyncSchedule

    return SyncSchedule.of(a.trainer_common.off_policy)


@dataclass(frozen=True)
class Feature:
    name: str
    title: str  # as the table shows it
    key: str  # the key that asks for it
    used: Callable[[Any], bool]  # of the config's `astuner` tree
    asked_by: Optional[Callable[[Any], str]] = None  # the key this config asks by, where several can (else `key`)


FEATURES = (
    Feature("several_policies", "several policies (`astuner.policies`)", "astuner.policies",
            lambda a: bool(a.policies)),
    Feature("auxiliary_models", "frozen auxiliary models", "astuner.auxiliary_models",
            lambda a: bool(a.auxiliary_models)),
    Feature("lora", "LoRA", "astuner.model.lora", lambda a: a.model.lora is not None),
    Feature("sft_warm_start", "SFT warm start", "astuner.trainer_common.sft.steps",
            lambda a: a.trainer_common.sft.steps > 0),
    Feature("traces", "training from a trace store (astuner serve / traces import)",
            "astuner.trainer_common.traces.store", lambda a: a.trainer_common.traces.store is not None),
    Feature("task_selector", "task selectors beyond sequential / shuffle",
            "astuner.task_reader.task_selector.selector_type",
            lambda a: a.task_reader.selector.selector_type not in ORDERED),
    Feature("experience_operators", "experience operators", "astuner.data_processor.experience_pipeline.operators",
            lambda a: bool(a.data_processor.experience_pipeline.operators)),
    Feature("grpo_without_std", "GRPO advantages not divided by the group's std",
            "astuner.trainer_common.algorithm.norm_adv_by_std_in_grpo",
            lambda a: not a.trainer_common.algorithm.norm_adv_by_std_in_grpo),
    Feature("off_policy", "rollouts ahead of training (a staleness bound above 0)",
            "astuner.trainer_common.off_policy.max_staleness", lambda a: not _schedule(a).synchronous,
            lambda a: "astuner.trainer_common.off_policy." + next(
                (k for k, synchronous in (("max_staleness", 0), ("sync_interval", 1), ("sync_offset", 0))
                 if getattr(a.trainer_common.off_policy, k) not in (None, synchronous)), "max_staleness")),
    Feature("stale_drop", "stale samples dropped instead of waited for",
            "astuner.trainer_common.off_policy.on_stale",
            lambda a: not _schedule(a).synchronous and a.trainer_common.off_policy.on_stale == "drop"),
    Feature("short_group_train", "groups short of a failed episode trained as they are",
            "astuner.rollout.short_group",
            lambda a: a.rollout.short_group == "train" and a.rollout.failure_reward is None),
    Feature("mini_batches", "several optimizer steps per step", "astuner.trainer_common.mini_batch_num",
            lambda a: a.trainer_common.mini_batch_num != 1),
)
BY_NAME = {f.name: f for f in FEATURES}


def declared(name: str) -> dict[str, str]:
    """The backbone's refusals, every feature checked to be one `FEATURES` names."""
    refuses = dict(getattr(get_backbone(name), "refuses", {}))
    unknown = sorted(set(refuses) - set(BY_NAME))
    if unknown:
        raise TypeError(f"backbone {name} refuses features no config can ask for: {', '.join(unknown)}")
    return refuses


def offered_by(feature: str) -> list[str]:
    return [name for name in BACKBONES if feature not in declared(name)]


def refusal(backbone: str, feature: str, key: Optional[str] = None, choose: str = "--backbone ") -> Optional[str]:
    """The one line refusing `feature` on `backbone` (asked for by `key`, the feature's own by default; another
    backbone chosen with `choose`: the CLI's flag, tune()'s `backbone=`); None when the backbone offers it."""
    reason = declared(backbone).get(feature)
    if reason is None:
        return None
    others = [name for name in offered_by(feature) if name != backbone]
    fix = f"use {choose}{' or '.join(others)}, or remove it" if others else "remove it"
    return f"{key or BY_NAME[feature].key}: {reason} (backbone {backbone}); {fix}"


def refusals(config: Any, backbone: str, sound: Callable[[str], bool] = lambda key: True) -> list[ConfigError]:
    """Each feature `config` uses that `backbone` refuses, as one error (`sound(key)`: the key validated, so that
    reading it means what the user wrote)."""
    a = config.astuner
    out = []
    for feature in FEATURES:
        if not sound(feature.key) or not feature.used(a):
            continue
        line = refusal(backbone, feature.name, feature.asked_by(a) if feature.asked_by else None)
        if line:
            out.append(ConfigError(line))
    return out


def table() -> str:
    """The backbone × feature table (markdown): "yes", or "refused: " and the reason."""
    names = list(BACKBONES)
    rows = ["| feature | " + " | ".join(f"`{n}`" for n in names) + " |", "| --- |" + " --- |" * len(names)]
    refuses = {name: declared(name) for name in names}
    for feature in FEATURES:
        cells = [f"refused: {refuses[n][feature.name]}" if feature.name in refuses[n] else "yes" for n in names]
        rows.append(f"| {feature.title} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(table() + "\n")
