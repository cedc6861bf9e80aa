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
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from astuner.config.schema_trainer import TrainerCommonConfig


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


# peft's own parts of an adapted model's parameter names: its wrapper (base_model.model.<the model's names>) and
# an adapted layer's (<layer>.base_layer.weight, <layer>.lora_A.<adapter>.weight, DoRA's lora_magnitude_vector)
PEFT_PARTS = ("base_model", "model", "base_layer", "lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B",
              "lora_magnitude_vector", "lora_dropout", "weight", "bias")
# the parts of common causal LMs' parameter names, for a base model whose weights are not at hand (a hub id not
# downloaded, a tiny model not created yet); the run checks the loaded model's own names before it trains
COMMON_PARTS = ("model", "layers", "self_attn", "mlp", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                "down_proj", "embed_tokens", "norm", "input_layernorm", "post_attention_layernorm", "q_norm", "k_norm",
                "rotary_emb", "lm_head", "experts", "gate", "shared_expert", "shared_expert_gate", "transformer", "h",
                "attn", "c_attn", "c_proj", "c_fc", "ln_1", "ln_2", "ln_f", "wte", "wpe", "gpt_neox", "embed_out",
                "query_key_value", "dense", "decoder", "fc1", "fc2", "language_model")


def adapter_name_problem(name: str, weights: Optional[list[str]] = None) -> Optional[str]:
    """Why peft cannot hold an adapter named `name` (a LoRA policy that shares its base is one) on a base model
    whose parameter names are `weights` (None: not at hand, COMMON_PARTS stand in), or None. peft picks an
    adapter's weights out of the model (saving one adapter, adding another) by '.<name>.' in their names, so the
    name must be no part of any other weight's name."""
    import torch

    named = "a LoRA policy is a peft adapter named after it, and "
    if name == "__base__":
        return named + "it is peft's name for 'no adapter' in a mixed batch"
    if name in "lora_":
        return named + "peft finds an adapter's weights by the name after its 'lora_' prefix, which contains it"
    if "." in name:
        return named + "peft names an adapter's weights '<layer>.lora_A.<name>.weight', which a '.' would split"
    if hasattr(torch.nn.ModuleDict(), name):
        return named + "peft keeps adapters in a torch ModuleDict, where it is the name of a method"
    where = ("numbers a layer there (model.layers.0.mlp...)" if name.isdigit() else
             "is part of peft's own names (<layer>.lora_A.<adapter>.weight)" if name in PEFT_PARTS else None)
    if where is None:
        from astuner.model.weight_names import name_parts

        if weights is None:
            where = ("is part of common models' names (model.layers.0.mlp.up_proj.weight)" if name in COMMON_PARTS
                     else None)
        elif name in name_parts(weights) | {"lm_head"}:  # a tied output head is not in the file but in the model
            example = next((w for w in weights if name in w.split(".")), "lm_head.weight")
            where = f"is part of the base model's names ({example if len(example) <= 40 else example[:37] + '...'})"
    if where is None:
        return None
    return (f"this LoRA policy's peft adapter is found by '.{name}.' in weight names, which {where}: other "
            f"adapters' saved weights would be corrupt")

def base_weight_names(cfg: Any, name: str, roots: Sequence[Path] = ()) -> Optional[list[str]]:
    """The parameter names of the base model of policy `name` (its own path, else astuner.model's), read from
    its safetensors without loading it; None when its weights are not at hand."""
    from astuner.backbone.vllm_memory import model_folder
    from astuner.config.paths import find_user_path
    from astuner.model.model_path import tiny_model_folder
    from astuner.model.weight_names import weight_names

    p = cfg.policies[name]
    path, tiny = (p.path, p.tiny) if p.path is not None else (cfg.model.path, cfg.model.tiny)
    if tiny is not None:
        folder: Optional[Path] = tiny_model_folder(path)
    else:
        found = find_user_path(path, roots)
        folder = found if found is not None else model_folder(path)
    return weight_names(folder) if folder is not None and folder.is_dir() else None


def adapter_names_problem(names: Sequence[str], weights_of: Callable[[str], Optional[list[str]]]) -> Optional[str]:
    """The first LoRA policy in `names` whose adapter name peft cannot hold (`adapter_name_problem`) on its base,
    whose parameter names `weights_of(name)` gives, as the one-line message; or None."""
    for name in names:
        problem = adapter_name_problem(name, weights_of(name))
        if problem:
            return f"astuner.policies.{name}: {problem}; rename it"
    return None


def policy_lora(cfg: Any, name: str) -> Any:
    """A policy's LoRA settings (None: it trains whole): its own, else, for a copy of astuner.model (no path),
    model.lora."""
    p = cfg.policies[name]
    return p.lora if p.lora is not None or p.path is not None else cfg.model.lora


def lora_policies(cfg: Any) -> list[str]:
    """The policies trained (or served) as LoRA adapters."""
    return [name for name in cfg.policies if policy_lora(cfg, name) is not None]


def check_supported(cfg: Any, engine_kind: str, roots: Sequence[Path] = ()) -> Optional[str]:
    """Why this run's policies cannot run on the debug backbone, or None. A LoRA policy's name is checked against
    its base model's parameter names where its weights are at hand (`roots`: where a relative path is looked up)."""
    if not any(p.trainable for p in cfg.policies.values()):
        return ("astuner.policies: every policy is frozen (trainable: false), so nothing would be trained; make one "
                "trainable")
    problem = adapter_names_problem(lora_policies(cfg), lambda name: base_weight_names(cfg, name, roots))
    if problem:
        return problem
    if engine_kind != "hf":
        return (f"astuner.policies: several policies are served by hf engines (one per policy); engine "
                f"{engine_kind} serves one model; set astuner.rollout.engine: hf")
    if cfg.trainer_common.sft.steps > 0:
        return ("astuner.trainer_common.sft: the SFT warm start trains one policy; with astuner.policies set sft.steps "
                "to 0 (or warm-start each policy's model first and point its path there)")
    return None
