"""What `--resume` needs of the config, checked against the newest complete checkpoint before the run folder is
touched (its config.yaml is rewritten only once these pass): the checkpoint's layout (model/ for one policy,
policies/<name>/ for each learning policy of astuner.policies), and for each saved policy whole weights or a LoRA
adapter as the config asks, made with the LoRA settings the config gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from astuner.errors import ConfigError


def check_resume(cfg: Any, checkpoints: Path) -> None:
    """ConfigError / DataError naming the key the checkpoint under `checkpoints` contradicts; nothing when there is
    no complete checkpoint (the run starts over)."""
    from astuner.backbone.debug.checkpoint import latest_checkpoint
    from astuner.backbone.debug.policies import policy_lora

    checkpoint = latest_checkpoint(checkpoints)
    if checkpoint is None:
        return
    if not cfg.policies:
        if not (checkpoint / "model").is_dir() and (checkpoint / "policies").is_dir():
            raise ConfigError(f"{checkpoint} was saved by a run with astuner.policies (policies/<name>/, no model/); "
                              f"resume with those policies, or start a new experiment")
        check_saved_policy(checkpoint / "model", cfg.model.lora, "astuner.model.lora")
        return
    for name, policy in cfg.policies.items():
        if not policy.trainable:  # a frozen policy is never saved: it is loaded from its path again
            continue
        saved = checkpoint / "policies" / name
        if not saved.is_dir():
            raise ConfigError(f"{checkpoint} holds no weights of policy {name!r} (policies/{name}/): the run was saved "
                              f"with other astuner.policies; resume with the policies it started with, or start a new "
                              f"experiment")
        lora_key = f"astuner.policies.{name}.lora" if policy.lora is not None else "astuner.model.lora"
        check_saved_policy(saved, policy_lora(cfg, name), lora_key)


def check_saved_policy(folder: Path, lora_cfg: Any, key: str = "astuner.model.lora") -> None:
    """`folder` holds what `lora_cfg` asks for: a LoRA adapter made with those settings, or (None) whole weights."""
    from astuner.backbone.debug import lora

    adapter = lora.is_adapter_folder(folder)
    if adapter != (lora_cfg is not None):
        held = "a LoRA adapter" if adapter else "a whole model"
        raise ConfigError(f"{folder} holds {held} but {key} is {'not ' if lora_cfg is None else ''}set; resume with "
                          f"the config the run started with, or start a new experiment")
    if adapter:
        lora.check_same_adapter(folder, lora_cfg, key)
