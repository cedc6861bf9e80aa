"""LoRA in the debug backbone (`astuner.model.lora`), on peft.

The policy becomes a peft model: the base weights frozen, low-rank adapters on the chosen linear layers the
only trained parameters (the optimizer holds their state alone). The hf engine shares that module, so it
samples with the adapter applied; an engine with weights of its own (vLLM) receives the merged weights,
named as the base model's. A checkpoint's `model/` holds the adapter (adapter_config.json,
adapter_model.safetensors) and the tokenizer; `astuner merge-lora` writes base + adapter as one model.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Optional

from astuner.errors import DataError

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_folder(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file()


def peft_config(lora: Any) -> Any:
    """peft's LoraConfig for `astuner.model.lora` ({rank, alpha, target_modules, dropout})."""
    from peft import LoraConfig, TaskType

    return LoraConfig(task_type=TaskType.CAUSAL_LM, r=lora.rank, lora_alpha=lora.alpha,
                      target_modules=lora.target_modules, lora_dropout=lora.dropout, bias="none")


def add_adapter(model: Any, lora: Any, seed: int = 0, name: str = "default") -> Any:
    """`model` with fresh adapters (B = 0: the policy is unchanged until the first update; A drawn from
    `seed` alone, whatever ran before). `name`: the adapter's; on a model that is a peft model already, one more
    adapter is added (several policies on one base)."""
    import warnings

    import torch
    from peft import get_peft_model

    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            # peft warns of an adapted head or embedding of a tied model: handled (tied_embedding_adapted, merge)
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
            if hasattr(model, "peft_config"):
                model.add_adapter(name, peft_config(lora))
                return model
            return get_peft_model(model, peft_config(lora), adapter_name=name)
    except ValueError as exc:  # peft: target modules not found in the model, or of a kind it cannot adapt
        text = " ".join(str(exc).split())
        text = text if len(text) <= 300 else text[:297] + "..."
        raise DataError(f"astuner.model.lora.target_modules {lora.target_modules!r}: {text}") from None


def check_same_adapter(folder: Path, lora: Any, key: str = "astuner.model.lora") -> None:
    """A resumed run's adapter was made with the settings the config asks for (else the run would go on with
    the checkpoint's and report the config's)."""
    saved = adapter_config(folder)
    pairs = [("rank", lora.rank, saved.get("r")), ("alpha", float(lora.alpha), float(saved.get("lora_alpha", 0))),
             ("dropout", float(lora.dropout), float(saved.get("lora_dropout", 0.0)))]
    if isinstance(lora.target_modules, list):
        pairs.append(("target_modules", sorted(lora.target_modules), sorted(saved.get("target_modules") or [])))
    for name, asked, held in pairs:
        if asked != held:
            raise DataError(f"{key}.{name} is {asked} but the checkpoint {checkpoint_name(folder)}'s adapter "
                            f"has {held}; resume with the settings the run started with, or start a new experiment")


def checkpoint_name(folder: Path) -> str:
    """global_step_N of a checkpoint's model/ or policies/<name>/ folder (else the folder's own name)."""
    return next((p.name for p in (folder, *folder.parents) if p.name.startswith("global_step_")), folder.name)


def adapter_config(folder: Path) -> dict[str, Any]:
    """`folder`'s adapter_config.json as a mapping; a damaged one is a one-line DataError naming it."""
    import json

    path = folder / ADAPTER_CONFIG
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(saved, dict):
            raise ValueError(f"a JSON {type(saved).__name__}, not an object")
    except (OSError, ValueError) as exc:  # json's JSONDecodeError and a bad encoding are ValueErrors
        raise DataError(f"{path} is not a readable adapter config ({type(exc).__name__}: {_one_line(exc, 120)}); the "
                        f"checkpoint is damaged: use another one") from None
    return saved


def _weights_unreadable(exc: BaseException) -> bool:
    """An adapter's weight file that cannot be read (truncated, not safetensors) rather than weights that do not
    fit the model."""
    return type(exc).__name__ == "SafetensorError" or isinstance(exc, (EOFError, OSError))


def load_adapter(model: Any, folder: Path, trainable: bool = True, name: str = "default") -> Any:
    """`model` with the adapter saved in `folder` (a checkpoint's model/ or policies/<name>/), as adapter `name`;
    on a model that is a peft model already, one more adapter is loaded."""
    import warnings

    from peft import PeftModel

    with warnings.catch_warnings():  # see add_adapter
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
        if hasattr(model, "peft_config"):
            model.load_adapter(str(folder), adapter_name=name, is_trainable=trainable)
        else:
            model = PeftModel.from_pretrained(model, str(folder), adapter_name=name, is_trainable=trainable)
    check_adapter_tensors(model, folder, name)
    return model


def check_adapter_tensors(model: Any, folder: Path, name: str) -> None:
    """The adapter file in `folder` holds the tensors its config makes on this base (each adapted layer's lora_A
    and lora_B, as adapter `name` of `model` has them), no more and no fewer: peft loads a file that lacks some
    (leaving them as initialised) or holds another adapter's (ignoring them) without a word, so a damaged
    checkpoint is a DataError naming it, never a model with random weights in it."""
    from peft import get_peft_model_state_dict

    expected = set(get_peft_model_state_dict(model, adapter_name=name, save_embedding_layers=False))
    held = set(_saved_tensor_names(folder))
    missing = sorted(expected - held)
    # a saved embedding layer (peft keeps a resized one whole) is a base weight: only LoRA tensors are foreign
    foreign = sorted(k for k in held - expected if any(p.startswith("lora_") for p in k.split(".")))
    if not missing and not foreign:
        return
    said = [f"{len(missing)} of its {len(expected)} tensors missing (e.g. {_short_key(missing[0])})"] if missing else []
    if foreign:
        said.append(f"{len(foreign)} that are not its own (e.g. {_short_key(foreign[0])})")
    raise DataError(f"the adapter in {folder} does not match its {ADAPTER_CONFIG}: {' and '.join(said)}; the "
                    f"checkpoint is damaged: use another one")


def _saved_tensor_names(folder: Path) -> list[str]:
    from astuner.model.weight_names import safetensors_names

    file = folder / "adapter_model.safetensors"
    if file.is_file():
        return safetensors_names(file)
    import torch

    return list(torch.load(folder / "adapter_model.bin", map_location="cpu", weights_only=True))


def _short_key(key: str) -> str:
    key = key.removeprefix("base_model.model.")
    return key if len(key) <= 50 else "..." + key[-47:]


def adapter_parameters(model: Any, name: str) -> list[Any]:
    """The parameters of adapter `name` of a peft model (what its policy's optimizer updates), whatever their
    requires_grad says at the moment (peft sets it for the active adapter only). peft names them
    `...<layer>.lora_A.<adapter>.weight`."""
    out = []
    for key, param in model.named_parameters():
        parts = key.split(".")
        at = next((i for i, part in enumerate(parts) if part.startswith("lora_")), None)
        if at is not None and at + 1 < len(parts) and parts[at + 1] == name:
            out.append(param)
    return out


class OneAdapter:
    """Adapter `name` of a multi-adapter peft model, saved as a folder of its own (adapter_config.json +
    adapter_model.safetensors, as a one-adapter checkpoint's model/): it loads back with load_adapter and merges
    with `astuner merge-lora`."""

    def __init__(self, model: Any, name: str):
        self.model, self.name = model, name

    def save_pretrained(self, folder: Path) -> None:
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        state = get_peft_model_state_dict(self.model, adapter_name=self.name)
        save_file({k: v.detach().contiguous() for k, v in state.items()}, str(Path(folder) / "adapter_model.safetensors"))
        config = copy.copy(self.model.peft_config[self.name])
        config.inference_mode = True  # as peft writes it; load_adapter(trainable=True) turns it back on
        if config.base_model_name_or_path is None:  # merge-lora finds the base from it
            config.base_model_name_or_path = getattr(self.model.get_base_model().config, "_name_or_path", None)
        config.save_pretrained(str(folder))


class AdapterDisabled:
    """The KL reference of a LoRA policy without a warm start: the policy's own module with its adapter off,
    which is the initial policy (the base weights never change), so no second copy of the weights is held."""

    def __init__(self, model: Any):
        self.model = model

    def get_base_model(self) -> Any:
        return self.model.get_base_model()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.model.disable_adapter():
            return self.model(*args, **kwargs)


def _lora_modules(model: Any) -> dict[str, Any]:
    """The adapted layers (linear and embedding), keyed by their name in the base model."""
    base = model.get_base_model()
    return {name: module for name, module in base.named_modules()
            if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight")}


def tied_embedding_adapted(model: Any) -> bool:
    """Whether the adapter is on the output head or the input embedding of a model whose two are one matrix
    (tied): adapted, they differ, which a model loaded as tied cannot hold."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    adapted = [hasattr(m, "base_layer") for m in (base.get_output_embeddings(), base.get_input_embeddings())]
    return bool(getattr(base.config, "tie_word_embeddings", False)) and any(adapted)


def _adapts(layer: Any, adapter: str) -> bool:
    return adapter in getattr(layer, "lora_A", {}) or adapter in getattr(layer, "lora_embedding_A", {})


def merged_state_dict(model: Any) -> dict[str, Any]:
    """The policy's weights as the base model names them, each adapted layer's weight W + scale * B @ A;
    a model without adapters gives its own state_dict. The model is left as it was (nothing merged in place)."""
    if not hasattr(model, "get_base_model"):
        return model.state_dict()
    import torch

    adapter = model.active_adapter
    layers = _lora_modules(model)
    out: dict[str, Any] = {}
    with torch.no_grad():
        for key, tensor in model.get_base_model().state_dict().items():
            if ".lora_" in key:
                continue
            name = key.replace(".base_layer.", ".")
            module_name, _, leaf = name.rpartition(".")
            layer = layers.get(module_name)
            if layer is not None and leaf == "weight" and _adapts(layer, adapter):
                tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
            out[name] = tensor
    return out


def trainable_counts(model: Any) -> tuple[int, int]:
    """(trainable parameters, all parameters)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def merge_checkpoint(adapter_folder: Path, out: Path, base: Optional[str] = None) -> Path:
    """Base model + the adapter in `adapter_folder`, merged and saved (with the tokenizer) into `out`; the base
    is `base` or the adapter config's base_model_name_or_path. `out` appears whole or not at all."""
    import os
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config_path = adapter_folder / ADAPTER_CONFIG
    if not adapter_folder.exists():
        raise DataError(f"{adapter_folder} does not exist; name a checkpoint, e.g. launcher_record/<experiment>/"
                        f"checkpoints/global_step_N")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(f"{out} already exists; name a new folder for the merged model")
    if not out.parent.is_dir():
        raise DataError(f"{out.parent} is not a folder; name an output folder inside an existing one")
    if not config_path.is_file():
        raise DataError(f"{adapter_folder} holds no LoRA adapter ({ADAPTER_CONFIG} missing); a checkpoint of a run "
                        f"with astuner.model.lora has one in global_step_N/model, one with astuner.policies in "
                        f"global_step_N/policies/<name>")
    hint = "check --base" if base else "pass --base"
    base = base or adapter_config(adapter_folder).get("base_model_name_or_path")
    if not base:
        raise DataError(f"{config_path} names no base model; pass --base")
    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - OSError, safetensors' and transformers' errors on a bad folder
        raise DataError(f"cannot load the base model {base!r} ({type(exc).__name__}: {_one_line(exc)}); {hint}") \
            from None
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    if tied:  # the head gets a weight of its own, so merging into it leaves the input embedding as it was
        model.config.tie_word_embeddings = False
        model.get_output_embeddings().weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    try:
        merged = load_adapter(model, adapter_folder, trainable=False).merge_and_unload()
    except Exception as exc:  # noqa: BLE001 - a damaged weight file, or shapes / modules of another base model
        if _weights_unreadable(exc):
            raise DataError(f"cannot read the adapter weights in {adapter_folder} ({type(exc).__name__}: "
                            f"{_one_line(exc, 80)}); the checkpoint is damaged: use another one") from None
        if not isinstance(exc, (RuntimeError, ValueError, KeyError)):
            raise
        # the lines' limit: the folders as given, then as much of peft's / torch's reason as fits
        said = f"the adapter in {adapter_folder} does not fit the base model {base!r} ({type(exc).__name__}: "
        room = max(300 - len("astuner: error: ") - len(said) - len(f"); {hint}"), 40)
        raise DataError(f"{said}{_one_line(exc, room)}); {hint}") from None
    if tied and torch.equal(merged.get_output_embeddings().weight, merged.get_input_embeddings().weight):
        merged.config.tie_word_embeddings = True  # neither was adapted: the model stays tied
        merged.tie_weights()
    partial = out.with_name(out.name + ".partial")  # written whole, then renamed: never a half-written model
    shutil.rmtree(partial, ignore_errors=True)
    try:
        merged.save_pretrained(partial)
        tokenizer_source = adapter_folder if (adapter_folder / "tokenizer_config.json").is_file() else base
        AutoTokenizer.from_pretrained(str(tokenizer_source)).save_pretrained(partial)
        os.replace(partial, out)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise DataError(f"cannot write the merged model to {out} ({type(exc).__name__}: {_one_line(exc)})") from None
    return out
