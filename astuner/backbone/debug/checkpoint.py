"""Checkpoints: `checkpoints/global_step_N/` holds `model/` (save_pretrained: weights, config,
tokenizer) — with several policies `policies/<name>/` per learning policy instead —, `trainer_state.pt`
(optimizers, RNG states, data order, engine samplers, history) and a `COMPLETE` marker written last, so a
checkpoint cut short by a crash is never resumed from."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path
from typing import Any, Optional

from loguru import logger

_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def rng_state(engine: Any = None) -> dict[str, Any]:
    """The process's RNG states and the engine's sampler (`engine` may be {policy: engine}: one each)."""
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    # plain lists, not an ndarray: trainer_state.pt loads with torch.load(weights_only=True)
    state = {"python": random.getstate(), "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if isinstance(engine, dict):
        state["engines"] = {name: e.generator.get_state() for name, e in engine.items()
                            if getattr(e, "generator", None) is not None}
        return state
    generator = getattr(engine, "generator", None)
    if generator is not None:
        state["engine"] = generator.get_state()
    return state


def restore_rng(state: dict[str, Any], engine: Any = None) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if isinstance(engine, dict):
        if len(engine) == 1 and "engine" in state:  # one policy: saved under "engine"
            engine = next(iter(engine.values()))
        else:
            for name, saved in state.get("engines", {}).items():
                if name in engine and getattr(engine[name], "generator", None) is not None:
                    engine[name].generator.set_state(saved)
            return
    generator = getattr(engine, "generator", None)
    if generator is not None and "engine" in state:
        generator.set_state(state["engine"])


def save_checkpoint(folder: Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    keep: Optional[int] = None) -> Path:
    """`model`: the one policy (saved in model/), or {subfolder: model} (policies/<name>). Written into a hidden
    `.global_step_N.partial` folder and renamed when complete: a write that fails (a full disk) leaves nothing
    half-written and never costs a complete checkpoint; `StorageError` when the disk was the cause."""
    import torch

    target = folder / f"global_step_{step}"
    partial = folder / f".global_step_{step}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for sub, each in (model.items() if isinstance(model, dict) else [("model", model)]):
            (partial / sub).mkdir(parents=True)
            each.save_pretrained(partial / sub)
            tokenizer.save_pretrained(partial / sub)
        partial.mkdir(parents=True, exist_ok=True)
        torch.save({**state, "step": step}, partial / "trainer_state.pt")
        (partial / "COMPLETE").write_text(str(step))
    except Exception as exc:
        from astuner.errors import StorageError
        from astuner.records.storage import disk_failure

        why = disk_failure(exc, folder)  # before the partial folder is removed: its bytes are what filled the disk
        shutil.rmtree(partial, ignore_errors=True)
        if why:
            raise StorageError(f"checkpoint global_step_{step} not saved: {why}") from exc
        raise
    if target.exists():  # saved again (a stop right after a periodic save): the new one replaces it
        shutil.rmtree(target)
    partial.rename(target)
    if keep is not None:
        for old in list_checkpoints(folder)[:-keep]:
            shutil.rmtree(old[1], ignore_errors=True)
    logger.info(f"saved checkpoint {target}")
    return target


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first."""
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            m = _STEP_DIR.match(child.name)
            if m and (child / "COMPLETE").exists():
                found.append((int(m.group(1)), child))
    return sorted(found)


def latest_checkpoint(folder: Path) -> Optional[Path]:
    found = list_checkpoints(folder)
    return found[-1][1] if found else None


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """Tensors, numbers, strings and containers only (`weights_only`): a run folder can be written by the
    sandboxed code an agent runs, and a full unpickle would run whatever a planted file says."""
    import pickle

    import torch

    from astuner.errors import UserError

    path = checkpoint / "trainer_state.pt"
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path} holds more than tensors and plain values, so it is not loaded ({first}); "
                        f"resume from another checkpoint or start afresh") from None
