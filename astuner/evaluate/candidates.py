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
SHOWN_KEYS = {*ENDPOINT_KEYS, *PATH_KEYS}  # the values an error may repeat (never a key=value that might be a secret)


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
    shown = ",".join(f"{k}={v if k in SHOWN_KEYS else '...'}" for k, v in fields.items())  # no secret repeated
    secret = sorted(k for k in fields if "key" in k and k != "api_key_env")
    if secret:
        raise DataError(f"--model {shown!r}: {secret[0]}= would put a key on the command line (and in the shell's "
                        f"history); export it and name the variable: api_key_env=VAR")
    if "base_url" in fields:
        unknown = sorted(set(fields) - set(ENDPOINT_KEYS))
        if unknown or "model" not in fields:
            raise DataError(f"--model {shown!r}: an endpoint is base_url=URL,model=NAME[,api_key_env=VAR][,label=L]"
                            + (f"; unknown {', '.join(unknown)}" if unknown else "; model= is missing"))
        if not re.match(r"^https?://", fields["base_url"]):
            raise DataError(f"--model {shown!r}: base_url must start with http:// or https://")
        env = fields.get("api_key_env")
        if env and not os.environ.get(env):
            raise DataError(f"--model {shown!r}: the environment variable {env} is not set here; export the "
                            f"endpoint's key in it")
        return Candidate(label=fields.get("label") or fields["model"], base_url=fields["base_url"].rstrip("/"),
                         model=fields["model"], api_key_env=env)
    unknown = sorted(set(fields) - set(PATH_KEYS))
    if unknown or "path" not in fields:
        raise DataError(f"--model {shown!r}: give a path, label=L,path=PATH, or base_url=URL,model=NAME"
                        + (f" (unknown {', '.join(unknown)})" if unknown else ""))
    return _local(fields["path"], fields.get("label"))


def _fields(spec: str) -> Optional[dict[str, str]]:
    """`key=value,...` as a mapping; None when `spec` is a plain path (it does not begin with a known key, or a
    folder of that name exists: `lr=1e-4/global_step_3`)."""
    first = re.match(r"^([A-Za-z_]+)=", spec)
    if first is None or Path(spec).expanduser().exists() or (
            first.group(1) not in SHOWN_KEYS and "key" not in first.group(1).lower()):
        return None
    out: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not value.strip():
            raise DataError(f"--model: {key or part!r} is not key=value (a value cannot hold a comma)")
        if key in out:
            raise DataError(f"--model: {key}= is given twice")
        out[key] = value.strip()
    return out


def _local(path: str, label: Optional[str]) -> Candidate:
    from astuner.chat import model_folder

    folder = Path(path).expanduser()
    if not folder.exists():
        raise DataError(f"--model {path}: no such folder")
    found = sorted((folder / "checkpoints" if (folder / "checkpoints").is_dir() else folder).glob("global_step_*"),
                   key=lambda p: int(p.name.rsplit("_", 1)[-1]) if p.name.rsplit("_", 1)[-1].isdigit() else -1)
    if found and not (folder / "model").is_dir() and not (folder / "config.json").is_file():
        names = ", ".join(p.name for p in found[:4]) + (f", ... {found[-1].name}" if len(found) > 4 else "")
        raise DataError(f"--model {path}: a run folder, not a checkpoint; name one of its checkpoints, e.g. "
                        f"--model {found[-1]} (it has {names})")
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
        if one.label in seen and seen[one.label].describe() == one.describe():
            raise DataError(f"--model: {one.describe()} is named twice; compare two different models (or the same "
                            f"one under two labels: label=NAME,path=PATH)")
        if one.label in seen:
            raise DataError(f"--model: two models are labelled {one.label!r} ({seen[one.label].describe()} and "
                            f"{one.describe()}); name them with label=NAME,path=PATH")
        seen[one.label] = one
    return candidates
