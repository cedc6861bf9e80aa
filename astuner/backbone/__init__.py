"""Backbones run the training loop: `--backbone NAME` picks one from the registry `BACKBONES`.

A backbone is an object with the `Backbone` protocol: whether it is installed, what it checks before launch
(what the machine gives the run), what `--dry-run` prints, the config it hands its engine, and the run
itself. Each lives in its own package (`debug/`, `verl/`, `trinity/`) whose `backbone.py` holds the object
`BACKBONE`; the registry names that module, so verl, trinity, ray and vllm are imported only when that
backbone is used, and nothing elsewhere chooses by the backbone's name.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, runtime_checkable

from astuner.errors import BackboneUnavailable

if TYPE_CHECKING:  # pragma: no cover
    from astuner.config import RunConfig
    from astuner.plugins import Plugins
    from astuner.records import RunDir

BACKBONES = {
    "debug": "astuner.backbone.debug.backbone",
    "verl": "astuner.backbone.verl.backbone",
    "trinity": "astuner.backbone.trinity.backbone",
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
    # an astuner key as the user set it: itself, or the tune() argument that sets it (tune() runs)
    key_name: Callable[[str], str] = lambda key: key


@runtime_checkable
class Backbone(Protocol):
    name: str
    uses_ray: bool  # runs on a Ray cluster (tune() starts a private head when none is given, as --with-ray)
    records_tokens: bool  # writes astuner's token-level trajectories (what the viewer's episodes show)
    refuses: dict[str, str]  # feature -> why this backbone cannot offer it (astuner.backbone.capabilities)

    def check_available(self) -> None:
        """`BackboneUnavailable` when what it needs is not installed (said before the run folder exists)."""

    def plan(self, config: "RunConfig") -> Optional[str]:
        """Before launch: one line on what the machine gives the run, or None; `ConfigError` naming the key
        for what the machine cannot honour."""

    def notes(self, config: "RunConfig") -> list[str]:
        """Lines on keys this backbone reads its own way (a `WarningNote` is said at WARNING), at --dry-run and at
        the start of a run."""

    def check_resume(self, config: "RunConfig", checkpoints: Any) -> None:
        """Before `--resume` touches the run folder: UserError naming the key the newest complete checkpoint under
        `checkpoints` contradicts (its layout, LoRA or not, the adapter's settings)."""

    def dry_run(self, config: "RunConfig", root: Any) -> str:
        """What `--dry-run` prints: the config the run would use, as YAML."""

    def run(self, ctx: RunContext) -> None:
        """Train, writing into `ctx.run_dir`."""


def get_backbone(name: str) -> Backbone:
    """The backbone registered as `name` (its package may still lack its optional dependencies)."""
    module_name = BACKBONES.get(name)
    if module_name is None:
        raise BackboneUnavailable(f"unknown backbone {name!r}; choose one of {', '.join(BACKBONES)}")
    if importlib.util.find_spec(module_name) is None:
        raise BackboneUnavailable(f"backbone {name} is not available in this version; "
                                  f"use --dry-run to check the config, or another --backbone")
    backbone = getattr(importlib.import_module(module_name), "BACKBONE", None)
    if not isinstance(backbone, Backbone):
        raise TypeError(f"backbone module {module_name} has no BACKBONE object with the Backbone protocol")
    return backbone


def load_backbone(name: str) -> Backbone:
    """`get_backbone(name)`, checked to be installed (e.g. its extra is missing: said before the run folder is
    created)."""
    backbone = get_backbone(name)
    backbone.check_available()
    return backbone
