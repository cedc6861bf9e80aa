"""When the rollout engines take new weights: `trainer_common.off_policy` read once, with Trinity-RFT's meaning of
its synchronizer (explorer step t syncs after step `sync_offset + j * sync_interval`, taking the trainer's weights
of step `j * sync_interval`), so one config means the same on every backbone.

Step t (1, 2, ...) is rolled out on version `v(t) = N * floor(max(0, t - 1 - d) / N)` (N = sync_interval,
d = sync_offset; version s = the weights after s updates) and trained when the learner is at version t - 1: its
samples lag by `t - 1 - v(t)`, at most `N - 1 + d` = the bound k (`max_staleness`). N = 1, d = 0: synchronous.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class SyncSchedule:
    interval: int  # N
    offset: int  # d
    bound: int  # k: the most versions a trained sample may lag
    on_stale: str  # wait | drop

    @classmethod
    def of(cls, off_policy: Any) -> "SyncSchedule":
        """From the config's section (validated: `problem` is None)."""
        n = off_policy.sync_interval
        d = off_policy.sync_offset
        if d is None:
            d = max(0, off_policy.max_staleness - (n - 1)) if off_policy.max_staleness is not None else 0
        k = off_policy.max_staleness if off_policy.max_staleness is not None else n - 1 + d
        return cls(n, d, k, off_policy.on_stale)

    @property
    def synchronous(self) -> bool:
        return self.bound == 0

    def version_for(self, step: int) -> int:
        """The weights step `step` is rolled out on (under `wait`)."""
        return self.interval * (max(0, step - 1 - self.offset) // self.interval)

    def describe(self) -> str:
        if self.synchronous:
            return "synchronous (each step rolled out on the weights it trains)"
        how = ("each step waits for the weights the schedule names" if self.on_stale == "wait"
               else "rollouts take the newest weights; older samples are dropped")
        return (f"off-policy: samples lag at most {self.bound} version(s) (sync_interval {self.interval}, sync_offset "
                f"{self.offset}; {how})")


def problem(off_policy: Any) -> Optional[tuple[str, str]]:
    """(key, one line) when the section's keys contradict each other."""
    n, d, k = off_policy.sync_interval, off_policy.sync_offset, off_policy.max_staleness
    if k is None:
        return None
    d = max(0, k - (n - 1)) if d is None else d
    if k < n - 1 + d:
        return ("astuner.trainer_common.off_policy.max_staleness",
                f"astuner.trainer_common.off_policy.max_staleness {k} is below what sync_interval {n} and sync_offset "
                f"{d} roll out (samples up to {n - 1 + d} versions old); raise it to {n - 1 + d} or leave it null")
    return None


def idle_keys(tc: Any) -> list[str]:
    """`trainer_common.off_policy` keys set that change nothing in this configuration (one line's worth): on_stale,
    anchor and is_cap when every sample is on-policy, is_cap with anchor behaviour (it still weighs training from a
    trace store's episodes, mode pg)."""
    from astuner.config.schema_trainer import OffPolicyConfig

    off, default = tc.off_policy, OffPolicyConfig()
    traces_weigh = bool(tc.traces.store) and tc.traces.mode == "pg"
    if not SyncSchedule.of(off).synchronous:  # off-policy: is_cap weighs with the learner anchor only
        return [] if off.anchor == "learner" or off.is_cap == default.is_cap or traces_weigh else \
            [f"is_cap {off.is_cap:g} (anchor {off.anchor} clips instead of weighing)"]
    idle = [f"{name} {getattr(off, name)}" for name in ("on_stale", "anchor")
            if getattr(off, name) != getattr(default, name)]
    if off.is_cap != default.is_cap and not traces_weigh:
        idle.append(f"is_cap {off.is_cap:g}")
    return [f"{', '.join(idle)} (max_staleness 0: every sample is on-policy)"] if idle else []
