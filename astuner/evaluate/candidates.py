"""The models `astuner eval` compares, from its `--model` values:

- a path: a model folder, a run's checkpoint (`global_step_N`, whose `model/` holds the weights), or a LoRA
  adapter folder (the adapter over the base model its `adapter_config.json` names);
- `base_url=URL,model=NAME[,api_key_env=VAR]`: an OpenAI-compatible endpoint (the keys of an
  `astuner.auxiliary_models` endpoint), its key read from the environment variable, never from the command line.

Any of them may start with `label=NAME,` (a path then as `path=PATH`): the name the table and eval.json give it
(default: the path's last parts, or the endpoint's model)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from astuner.errors import DataError

ENDPOINT_KEYS = ("base_url", "model", "api_key_env", "label")
PATH_KEYS = ("path", "label")


@dataclass(frozen=True)
class Candidate:
    label: str
    folder: Optional[Path] = None  # the weights (a model or LoRA adapter folder)
    base_url: Optional[str] = None  # an endpoint
    model: Optional[str] = None
    api_key_env: Optional[str] = None

    @property
    def is_endpoint(self) -> bool:
        return self.base_url is not None

    def describe(self) -> str:
        return f"{self.model} at {self.base_url}" if self.is_endpoint else str(self.folder)


def parse(spec: str) -> Candidate:
    """One `--model` value; DataError in one line naming it and what is wrong."""
    spec = spec.strip()
    if not spec:
        raise DataError("--model '': name a model folder, a checkpoint or base_url=URL,model=NAME")
    fields = _fields(spec)
    if fields is None:
        return _local(spec, None)
    if "base_url" in fields:
        unknown = sorted(set(fields) - set(ENDPOINT_KEYS))
        if unknown or "model" not in fields:
            raise DataError(f"--model {spec!r}: an endpoint is base_url=URL,model=NAME[,api_key_env=VAR][,label=L]"
                            + (f"; unknown {', '.join(unknown)}" if unknown else "; model= is missing"))
        if not re.match(r"^https?://", fields["base_url"]):
            raise DataError(f"--model {spec!r}: base_url must start with http:// or https://")
        env = fields.get("api_key_env")
        if env and not os.environ.get(env):
            raise DataError(f"--model {spec!r}: the environment variable {env} is not set here; export the "
                            f"endpoint's key in it")
        return Candidate(label=fields.get("label") or fields["model"], base_url=fields["base_url"].rstrip("/"),
                         model=fields["model"], api_key_env=env)
    unknown = sorted(set(fields) - set(PATH_KEYS))
    if unknown or "path" not in fields:
        raise DataError(f"--model {spec!r}: give a path, label=L,path=PATH, or base_url=URL,model=NAME"
                        + (f" (unknown {', '.join(unknown)})" if unknown else ""))
    return _local(fields["path"], fields.get("label"))


def _fields(spec: str) -> Optional[dict[str, str]]:
    """`key=value,...` as a mapping; None when `spec` is a plain path (no `name=` before its first comma)."""
    if not re.match(r"^[a-z_]+=", spec):
        return None
    out: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        if not sep or not value.strip():
            raise DataError(f"--model {spec!r}: {part!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def _local(path: str, label: Optional[str]) -> Candidate:
    from astuner.chat import model_folder

    folder = Path(path).expanduser()
    if not folder.exists():
        raise DataError(f"--model {path}: no such folder")
    if (folder / "actor").is_dir() and not (folder / "model").is_dir():
        raise DataError(f"--model {path}: a verl or Trinity-RFT checkpoint (FSDP shards in actor/); merge it into a "
                        f"model folder first (python -m verl.model_merger merge --backend fsdp --local_dir "
                        f"{folder}/actor --target_dir MODEL) and evaluate MODEL")
    folder = model_folder(folder)  # a checkpoint's model/, or the folder; DataError when it holds no model
    parts = [p for p in folder.absolute().parts if p != "model"]
    return Candidate(label=label or "/".join(parts[-2:]), folder=folder)


def unique_labels(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates, refused when two share a label (each needs its own row and its own trajectories)."""
    seen: dict[str, Candidate] = {}
    for one in candidates:
        if one.label in seen:
            raise DataError(f"--model: two models are labelled {one.label!r} ({seen[one.label].describe()} and "
                            f"{one.describe()}); name them with label=NAME,path=PATH")
        seen[one.label] = one
    return candidates
