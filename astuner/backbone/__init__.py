"""Backbones run the training loop: `--backbone` picks one from `BACKBONES`.

A backbone is a module with `run(ctx: RunContext) -> None` and optionally `check_available()`, which
raises `BackboneUnavailable` when what it needs is not installed. verl, trinity, ray and vllm are imported
only inside their backbone modules.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from astuner.errors import BackboneUnavailable

if TYPE_CHECKING:  # pragma: no cover
    from astuner.config import Plugins, RunConfig
    from astuner.records import RunDir

BACKBONES = {
    "debug": "astuner.backbone.debug",
    "verl": "astuner.backbone.verl",
    "trinity": "astuner.backbone.trinity",
}


@dataclass
class RunContext:
    config: "RunConfig"
    plugins: "Plugins"
    run_dir: "RunDir"
    with_ray: bool = False
    with_logview: bool = False
    # name -> AgentScope chat model handed to workflows and judges, never trained (the function API)
    auxiliary_models: dict[str, Any] = field(default_factory=dict)


def load_backbone(name: str) -> ModuleType:
    """The backbone module for `name`; `BackboneUnavailable` when this version does not ship it."""
    module_name = BACKBONES.get(name)
    if module_name is None:
        raise BackboneUnavailable(f"unknown backbone {name!r}; choose one of {', '.join(BACKBONES)}")
    if importlib.util.find_spec(module_name) is None:
        raise BackboneUnavailable(f"backbone {name} is not available in this version; "
                                  f"use --dry-run to check the config, or another --backbone")
    module = importlib.import_module(module_name)
    if not callable(getattr(module, "run", None)):
        raise TypeError(f"backbone module {module_name} has no run(ctx) function")
    check = getattr(module, "check_available", None)
    if check is not None:
        check()  # e.g. its extra is not installed: say so before the run folder is created
    return module


def translated_config(name: str, config: "RunConfig", root: Any) -> dict[str, Any]:
    """The config a distributed backbone hands to its engine (for --dry-run and the run itself)."""
    if name == "verl":
        from astuner.backbone.verl_backbone.translate import translate_to_verl

        return translate_to_verl(config, root)
    if name == "trinity":
        from astuner.backbone.trinity_backbone.translate import translate_to_trinity

        return translate_to_trinity(config, root)
    raise ValueError(f"backbone {name} has no translated config")


def dry_run_config(name: str, config: "RunConfig", root: Any) -> dict[str, Any]:
    """The translated config for --dry-run; checked against the package itself when it is installed
    (verl: merged into its ppo_trainer config; trinity: `check_with_trinity`)."""
    translated = translated_config(name, config, root)
    if name == "verl" and importlib.util.find_spec("verl") is not None:
        from omegaconf import OmegaConf

        from astuner.backbone.verl_backbone.compose import compose_verl_config

        return OmegaConf.to_container(compose_verl_config(translated), resolve=False)
    if name == "trinity" and importlib.util.find_spec("trinity") is not None:
        check_with_trinity(config)
    return translated


def check_with_trinity(config: "RunConfig") -> None:
    """What Trinity-RFT itself checks before a run: its `load_config`, then its full `check_and_update()`
    (every validator: algorithm, model lengths, GPU allocation, buffer, trainer, ...) on a translation
    rooted in a temporary folder, since the validators create folders; nothing is left behind. The model
    validator reads the model's config, so for a model that is not available locally only `load_config`
    runs, which is said."""
    import tempfile
    from pathlib import Path

    import yaml
    from loguru import logger
    from trinity.common.config import load_config

    from astuner.config.paths import find_user_path
    from astuner.errors import ConfigError

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trinity_config.yaml"
        path.write_text(yaml.safe_dump(translated_config("trinity", config, Path(folder)), sort_keys=False))
        try:
            trinity_config = load_config(str(path))
            model = find_user_path(config.astuner.model.path, config.extra_roots)
            if model is None:
                logger.warning(f"trinity: the model {config.astuner.model.path!r} is not available locally; checked "
                               f"with Trinity's load_config only, not its full check_and_update()")
                return
            trinity_config.model.model_path = str(model)
            trinity_config.check_and_update()
        except (ValueError, AssertionError) as exc:
            raise ConfigError(f"Trinity-RFT rejects the translated config: {str(exc).strip().splitlines()[0]}; "
                              f"check the astuner settings it names or the trinity: subtree of your YAML") from None
