"""Several policies in one debug run (`astuner.policies`): each is a model of its own with its own hf engine, or,
for LoRA policies on one base, an adapter of one shared peft model (one base in memory) sampled by one hf engine
with each call's adapter; when it learns it has its own `PolicyTrainer` (AdamW over its own parameters, settings
merged from trainer_common and the policy's overrides). A frozen policy is loaded with no
gradient and no optimizer, and nothing of it is saved. Checkpoints keep each learning policy's weights in
`policies/<name>/` and its optimizer in trainer_state.pt; with one policy the layout stays `model/`."""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from typing import Any, Optional

from astuner.config.schema import TrainerCommonConfig


@dataclass
class PolicySlot:
    name: str
    model: Any
    engine: Any
    trainer: Any  # PolicyTrainer, or None for a frozen policy
    folder: str  # its weights in a checkpoint: "model" (the one policy) or "policies/<name>"
    shares_weights: bool  # the engine runs the trained module itself (hf): nothing to push after an update
    adapter: Optional[str] = None  # its LoRA adapter on a base it shares with other policies (None: a model of its own)

    @property
    def learns(self) -> bool:
        return self.trainer is not None


def policy_seed(seed: int, name: str) -> int:
    """A seed per policy (adapter initialisation, engine sampling) derived from the run's: stable across runs
    (crc32, not Python's randomised hash)."""
    return (seed + zlib.crc32(name.encode("utf-8"))) % (2 ** 31)


def policy_trainer_config(tc: TrainerCommonConfig, policy: Any) -> TrainerCommonConfig:
    """trainer_common with the policy's own optim and algorithm values where it sets them."""
    def merged(base: Any, own: Any) -> Any:
        changes = {f.name: getattr(own, f.name) for f in dataclasses.fields(own) if getattr(own, f.name) is not None}
        return dataclasses.replace(base, **changes)

    return dataclasses.replace(tc, optim=merged(tc.optim, policy.optim),
                               algorithm=merged(tc.algorithm, policy.algorithm))


def same_vocabulary(a: Any, b: Any) -> bool:
    return a.get_vocab() == b.get_vocab() and a.chat_template == b.chat_template


def adapter_name_problem(name: str) -> Optional[str]:
    """Why peft cannot hold an adapter named `name` (a LoRA policy that shares its base is one), or None."""
    import torch

    if name == "__base__":
        return "it is peft's name for 'no adapter' in a mixed batch"
    if name in "lora_":
        return "peft finds an adapter's weights by the name after its 'lora_' prefix, which contains it"
    if "." in name:
        return "peft names an adapter's weights '<layer>.lora_A.<name>.weight', which a '.' would split"
    if hasattr(torch.nn.ModuleDict(), name):
        return "peft keeps adapters in a torch ModuleDict, where it is the name of a method"
    return None


def policy_lora(cfg: Any, name: str) -> Any:
    """A policy's LoRA settings (None: it trains whole): its own, else, for a copy of astuner.model (no path),
    model.lora."""
    p = cfg.policies[name]
    return p.lora if p.lora is not None or p.path is not None else cfg.model.lora


def lora_policies(cfg: Any) -> list[str]:
    """The policies trained (or served) as LoRA adapters."""
    return [name for name in cfg.policies if policy_lora(cfg, name) is not None]


def check_supported(cfg: Any, engine_kind: str) -> Optional[str]:
    """Why this run's policies cannot run on the debug backbone, or None."""
    if not any(p.trainable for p in cfg.policies.values()):
        return ("astuner.policies: every policy is frozen (trainable: false), so nothing would be trained; make one "
                "trainable")
    for name in lora_policies(cfg):
        problem = adapter_name_problem(name)
        if problem:
            return f"astuner.policies.{name}: a LoRA policy is a peft adapter named after it, and {problem}; rename it"
    if engine_kind != "hf":
        return (f"astuner.policies: several policies are served by hf engines (one per policy); engine "
                f"{engine_kind} serves one model; set astuner.rollout.engine: hf")
    if cfg.trainer_common.sft.steps > 0:
        return ("astuner.trainer_common.sft: the SFT warm start trains one policy; with astuner.policies set sft.steps "
                "to 0 (or warm-start each policy's model first and point its path there)")
    return None
