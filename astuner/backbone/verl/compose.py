"""verl's own `ppo_trainer` config with our translation merged in, checked as strictly as verl reads it:
a key verl does not know is an error, except where verl hands a section on whole or reads a dataclass
field its YAML leaves out."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from astuner.errors import BackboneUnavailable, ConfigError

# Sections verl hands to another library whole although its YAML lists some of their keys
# (`ray_kwargs.ray_init` becomes `ray.init(**...)`, runtime_env included).
PASSED_ON_SECTIONS = ("ray_kwargs.ray_init",)


def verl_config_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise BackboneUnavailable("backbone verl needs verl: pip install 'astuner[verl]' in an environment of its own "
                                  "(see docs/distributed.md)")
    return Path(spec.origin).parent / "trainer" / "config"


def open_sections(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the mappings that are empty in verl's own config (`model.override_config`,
    `rollout.engine_kwargs.vllm`, `data.apply_chat_template_kwargs`, ...): verl passes them on to another
    library as they are, so any key is the user's to set there."""
    from omegaconf import DictConfig

    found = []
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none():
            found += [f"{prefix}{key}"] if len(child) == 0 else open_sections(child, f"{prefix}{key}.")
    return found


def add_dataclass_fields(node: Any) -> None:
    """Give each section that verl builds into a dataclass (`_target_`) the fields its YAML leaves out, at
    their dataclass defaults: verl reads them (e.g. `fsdp_config.mixed_precision`), so they are valid keys."""
    import dataclasses

    from hydra.utils import get_class
    from omegaconf import DictConfig, open_dict

    target = node.get("_target_") if isinstance(node, DictConfig) else None
    cls = None
    if isinstance(target, str):
        try:
            cls = get_class(target)
        except Exception:  # noqa: BLE001 - a target verl itself cannot import is not ours to judge
            cls = None
    if cls is not None and dataclasses.is_dataclass(cls):
        with open_dict(node):
            for f in dataclasses.fields(cls):
                if f.name.startswith("_") or f.name in node:
                    continue
                if f.default is None or isinstance(f.default, (bool, int, float, str)):
                    node[f.name] = f.default
                elif f.default_factory in (dict, list):  # type: ignore[comparison-overlap]
                    node[f.name] = f.default_factory()
    for key in list(node.keys()) if isinstance(node, DictConfig) else []:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none():
            add_dataclass_fields(child)


def compose_verl_config(translated: dict[str, Any]) -> Any:
    """verl's `ppo_trainer` config with our translation merged in; a key verl does not know is an error,
    except inside the sections verl leaves open (`open_sections`)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        base = compose(config_name="ppo_trainer")
    add_dataclass_fields(base)
    OmegaConf.set_struct(base, True)
    for path in open_sections(base) + list(PASSED_ON_SECTIONS):
        OmegaConf.set_struct(OmegaConf.select(base, path), False)
    try:
        return OmegaConf.merge(base, OmegaConf.create(translated))
    except ConfigKeyError as exc:
        raise ConfigError(f"verl's trainer config has no key {getattr(exc, 'full_key', exc)!s}; fix the top-level verl "
                          f"keys in your YAML") from None
