"""Configuration: compose (Hydra), validate against the declared schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from astuner.config.schema import AstunerConfig
from astuner.errors import Found


@dataclass
class RunConfig:
    """Everything a backbone needs to know about the configuration of one run."""

    conf_path: Path
    merged: dict[str, Any]  # the whole resolved config: astuner tree, trinity subtree, verl keys
    astuner: AstunerConfig
    experiment_name: str
    # where relative plug-in files/modules and data paths are looked up when not found from the cwd:
    # the config file's folder, then each of its parents
    extra_roots: list[Path] = field(default_factory=list)
    # what the file's keys of the seed system's template were read as (config/seed_keys.py): one line each
    notes: list[str] = field(default_factory=list)


def load_run_config(conf_path: Path | str, overrides: Optional[list[str]] = None,
                    found: Optional[Found] = None) -> RunConfig:
    """Compose and validate; raises `ConfigError` with file:line for anything wrong. With `found`, the
    validation's problems are kept there instead (and the keys refused: a refused value is left at its default),
    so that the checks that follow report theirs too; a config that cannot be composed still raises."""
    from astuner.config.compose import compose_config
    from astuner.config.seed_keys import translate, trinity_schedule
    from astuner.config.validate import check_astuner_tree, validate_astuner_tree

    composed = compose_config(conf_path, overrides)
    notes = translate(composed.merged) + trinity_schedule(composed.merged)
    if found is None:
        cfg = validate_astuner_tree(composed.merged.get("astuner"), composed.source)
    else:
        cfg, problems, refused = check_astuner_tree(composed.merged.get("astuner"), composed.source)
        found.refused(problems, refused)
    name = cfg.experiment_name or composed.conf_path.stem
    cfg.experiment_name = name
    composed.merged["astuner"]["experiment_name"] = name
    attach_composed(cfg, composed.merged)
    conf_dir = composed.conf_path.parent
    return RunConfig(conf_path=composed.conf_path, merged=composed.merged, astuner=cfg, experiment_name=name,
                     extra_roots=[conf_dir, *conf_dir.parents], notes=notes)


def attach_composed(cfg: Any, merged: dict) -> None:
    """Keep the whole composed config (the user's own sections too) with the validated one: the seed system's
    workflows read it as `model_tuner.config`."""
    cfg._composed = merged


def composed_view(cfg: Any) -> Any:
    """The composed config kept with `cfg` as a read-only OmegaConf DictConfig (attribute access, as the seed
    system's `model_tuner.config`); None when `cfg` was not loaded from a file."""
    merged = getattr(cfg, "_composed", None)
    if merged is None:
        return None
    view = getattr(cfg, "_composed_view", None)
    if view is None:
        import copy

        from omegaconf import OmegaConf

        from astuner.config.keys import set_path
        from astuner.config.seed_keys import AS_WRITTEN

        tree = copy.deepcopy(merged)
        for dotted, value in (tree.pop(AS_WRITTEN, None) or {}).items():  # the seed keys as the file wrote them
            set_path(tree, f"astuner.{dotted}", value)
        view = OmegaConf.create(tree, flags={"readonly": True})
        cfg._composed_view = view
    return view
