"""Which policy serves which agent (`astuner.policies` + `astuner.rollout.agent_policy`).

An agent's name is looked up among the map's exact names first, then its shell-style patterns (`wolf_*`,
`player_?`); the config check refuses two patterns that can match one name, so at most one pattern matches. An
agent that nothing matches has no policy: it is not trained, and `register_model` hands it its default model.
With no `astuner.policies` the run has one policy, `default` (astuner.model), and the map is today's
`trainable_targets`: every agent, or the listed ones.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Optional

from astuner.config.agent_policy import is_pattern

DEFAULT = "default"


@dataclass
class PolicyMap:
    """Agent name -> policy name (None: the agent has no policy of the run), and which policies learn."""

    entries: dict[str, str] = field(default_factory=dict)  # agent name or pattern -> policy
    trainable: dict[str, bool] = field(default_factory=lambda: {DEFAULT: True})
    targets: Optional[list[str]] = None  # one policy: the agents it serves (None: all)

    @property
    def several(self) -> bool:
        return len(self.trainable) > 1 or bool(self.entries)

    def policy_of(self, agent: str) -> Optional[str]:
        if not self.several:
            only = next(iter(self.trainable))
            return only if self.targets is None or agent in self.targets else None
        if agent in self.entries:
            return self.entries[agent]
        for pattern, policy in self.entries.items():
            if is_pattern(pattern) and fnmatch.fnmatchcase(agent, pattern):
                return policy
        return None

    def learns(self, policy: Optional[str]) -> bool:
        return policy is not None and self.trainable.get(policy, False)

    def describe(self) -> list[str]:
        """The map as lines for --dry-run."""
        if not self.several:
            served = "every agent" if self.targets is None else ", ".join(self.targets)
            return [f"policy {next(iter(self.trainable))} (trainable): {served}"]
        lines = []
        for policy, learns in self.trainable.items():
            agents = [a for a, p in self.entries.items() if p == policy]
            lines.append(f"policy {policy} ({'trainable' if learns else 'frozen'}): "
                         f"{', '.join(agents) if agents else 'no agent'}")
        return lines


def policy_map(cfg: Any, workflow: Any = None) -> PolicyMap:
    """The run's map: astuner.policies with rollout.agent_policy, else the one policy with trainable_targets (the
    config's, else the workflow class's)."""
    if cfg.policies:
        entries = dict(cfg.rollout.agent_policy)
        if not entries and len(cfg.policies) == 1:
            entries = {"*": next(iter(cfg.policies))}
        return PolicyMap(entries, {name: p.trainable for name, p in cfg.policies.items()})
    targets = cfg.rollout.trainable_targets
    return PolicyMap(targets=targets if targets is not None else getattr(workflow, "trainable_targets", None))
