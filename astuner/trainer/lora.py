"""LoRA in the debug backbone (`astuner.model.lora`), on peft.

The policy becomes a peft model: the base weights frozen, low-rank adapters on the chosen linear layers the
only trained parameters (the optimizer holds their state alone). The hf engine shares that module, so it
samples with the adapter applied; an engine with weights of its own (vLLM) receives the merged weights,
named as the base model's. A checkpoint's `model/` holds the adapter (adapter_config.json,
adapter_model.safetensors) and the tokenizer; `astuner merge-lora` writes base + adapter as one model.
"""

from __future__ import annotations

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


def add_adapter(model: Any, lora: Any, seed: int = 0) -> Any:
    """`model` with fresh adapters (B = 0: the policy is unchanged until the first update; A drawn from
    `seed` alone, whatever ran before)."""
    import warnings

    import torch
    from peft import get_peft_model

    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # an adapted output head of a tied model: handled (tied_head_adapted)
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
            return get_peft_model(model, peft_config(lora))
    except ValueError as exc:  # peft: target modules not found in the model
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise DataError(f"astuner.model.lora.target_modules {lora.target_modules!r}: {first}") from None


def load_adapter(model: Any, folder: Path, trainable: bool = True) -> Any:
    """`model` with the adapter saved in `folder` (a checkpoint's model/)."""
    import warnings

    from peft import PeftModel

    with warnings.catch_warnings():  # see add_adapter
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
        return PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)


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
    """The wrapped linear layers, keyed by their name in the base model."""
    base = model.get_base_model()
    return {name: module for name, module in base.named_modules()
            if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight")}


def tied_head_adapted(model: Any) -> bool:
    """Whether the adapter is on the output head of a model whose head is its input embedding (tied): the
    adapted head then differs from the embedding, which a model loaded as tied cannot hold."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    return bool(getattr(base.config, "tie_word_embeddings", False)) and hasattr(head, "base_layer")


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
            if layer is not None and leaf == "weight" and adapter in layer.lora_A:
                tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
            out[name] = tensor
    return out


def trainable_counts(model: Any) -> tuple[int, int]:
    """(trainable parameters, all parameters)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def merge_checkpoint(adapter_folder: Path, out: Path, base: Optional[str] = None) -> Path:
    """Base model + the adapter in `adapter_folder`, merged and saved (with the tokenizer) into `out`; the base
    is `base` or the adapter config's base_model_name_or_path."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config_path = adapter_folder / ADAPTER_CONFIG
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(f"{out} already exists; name a new folder for the merged model")
    if not config_path.is_file():
        raise DataError(f"{adapter_folder} holds no LoRA adapter ({ADAPTER_CONFIG} missing); a checkpoint of a run "
                        f"with astuner.model.lora has one in global_step_N/model")
    base = base or json.loads(config_path.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base:
        raise DataError(f"{config_path} names no base model; pass --base")
    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - OSError, safetensors' and transformers' errors on a bad folder
        first = (str(exc).strip().splitlines() or [""])[0][:150]
        raise DataError(f"cannot load the base model {base!r} ({type(exc).__name__}: {first}); pass --base") from None
    import os
    import shutil

    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    if tied:  # the head gets a weight of its own, so merging into it leaves the input embedding as it was
        model.config.tie_word_embeddings = False
        model.get_output_embeddings().weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    merged = load_adapter(model, adapter_folder, trainable=False).merge_and_unload()
    if tied and torch.equal(merged.get_output_embeddings().weight, merged.get_input_embeddings().weight):
        merged.config.tie_word_embeddings = True  # the head was not adapted: the model stays tied
        merged.tie_weights()
    partial = out.with_name(out.name + ".partial")  # written whole, then renamed: never a half-written model
    shutil.rmtree(partial, ignore_errors=True)
    merged.save_pretrained(partial)
    tokenizer_source = adapter_folder if (adapter_folder / "tokenizer_config.json").is_file() else base
    AutoTokenizer.from_pretrained(str(tokenizer_source)).save_pretrained(partial)
    os.replace(partial, out)
    return out
