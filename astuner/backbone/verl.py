"""`--backbone verl`: verl 0.9 (PPO trainer, vLLM rollouts, FSDP) on Ray runs our workflow as its agent loop.

The run folder gets the tasks (`verl_data/train.jsonl`, `test.jsonl`, one row per astuner task, with the
task itself in `extra_info`), the agent-loop registry file and the composed verl config
(`verl_config.yaml`: verl's own `ppo_trainer` defaults, our translation, then the user's top-level verl
keys); then verl's `run_ppo` trains. Needs `pip install 'astuner[verl]'` (its own environment: verl pins
transformers < 5.11).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Optional

import yaml
from loguru import logger

from astuner.errors import BackboneUnavailable, ConfigError

CONFIG_FILE = "verl_config.yaml"
# Sections verl hands to another library whole although its YAML lists some of their keys
# (`ray_kwargs.ray_init` becomes `ray.init(**...)`, runtime_env included).
PASSED_ON_SECTIONS = ("ray_kwargs.ray_init",)


def verl_config_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise BackboneUnavailable("backbone verl needs verl: pip install 'astuner[verl]' in an environment of its own "
                                  "(see README, 'Distributed backbones')")
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


def check_batching(run: Any, n_train: int) -> None:
    """What verl 0.9 asserts in the middle of a run (it pads nothing), said before launch."""
    a = run.astuner
    tc, batch, n = a.trainer_common, a.data.train_batch_size, a.rollout.num_repeat
    gpus = tc.nnodes * tc.n_gpus_per_node
    problems = []
    if n_train < batch:
        problems.append(f"there are {n_train} training tasks, fewer than astuner.data.train_batch_size ({batch})")
    if batch % tc.mini_batch_num:
        problems.append(f"astuner.data.train_batch_size ({batch}) must be a multiple of "
                        f"astuner.trainer_common.mini_batch_num ({tc.mini_batch_num})")
    elif (batch // tc.mini_batch_num) * n % gpus:
        problems.append(f"each mini-batch's episodes (train_batch_size / mini_batch_num × num_repeat = "
                        f"{batch // tc.mini_batch_num * n}) must divide evenly over the {gpus} GPUs "
                        f"(trainer_common.nnodes × n_gpus_per_node)")
    longest = a.data.max_prompt_length + a.data.max_response_length
    if tc.max_token_len_per_micro_batch < longest:
        problems.append(f"astuner.trainer_common.max_token_len_per_micro_batch ({tc.max_token_len_per_micro_batch}) "
                        f"must hold one whole sequence (data.max_prompt_length + max_response_length = {longest})")
    if problems:
        raise ConfigError("backbone verl: " + "; ".join(problems))


BYTES_PER_TRAINED_PARAM = 16  # fp32 weights and gradients, AdamW's two moments


def model_parameters(model_path: str) -> Optional[int]:
    """Parameter count of a local model folder or a hub id in the local cache, from its safetensors (index or
    files); None when it cannot be told without a download."""
    import json

    folder = Path(model_path)
    if not folder.is_dir():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model_path, "config.json")
        except Exception:  # noqa: BLE001 - not a valid repo id either: nothing to tell
            cached = None
        if not isinstance(cached, str):
            return None
        folder = Path(cached).parent
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else {}
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "float32")
    width = 4 if "32" in dtype else 2
    index = folder / "model.safetensors.index.json"
    if index.exists():
        total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        if total:
            return int(total) // width
    files = list(folder.glob("*.safetensors"))
    return sum(f.stat().st_size for f in files) // width if files else None


def check_memory(run: Any, model_path: str, gpu_bytes: Optional[int], verl_keys: dict) -> None:
    """Full fine-tuning under FSDP holds ~16 bytes per parameter spread over the GPUs: say before launch
    when that cannot fit (the user contract's 14B model on one GPU, say) and what to change."""
    fsdp = verl_keys.get("actor_rollout_ref", {}).get("actor", {}).get("fsdp_config", {})
    params = model_parameters(model_path)
    if gpu_bytes is None or params is None or (fsdp.get("param_offload") and fsdp.get("optimizer_offload")):
        return
    tc = run.astuner.trainer_common
    gpus = tc.nnodes * tc.n_gpus_per_node
    need = BYTES_PER_TRAINED_PARAM * params / gpus
    if need > 0.9 * gpu_bytes:
        raise ConfigError(f"backbone verl: {params / 1e9:.1f}B parameters need about {need / 2**30:.0f} GiB per GPU to "
                          f"train (fp32 weights, gradients and AdamW moments over {gpus} GPU(s)), a GPU has "
                          f"{gpu_bytes / 2**30:.0f} GiB; set actor_rollout_ref.actor.fsdp_config.param_offload: true "
                          f"and optimizer_offload: true, use more GPUs (astuner.trainer_common.n_gpus_per_node / "
                          f"nnodes) or a smaller model")


def gpu_memory() -> Optional[int]:
    import torch

    return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None


def prepare(ctx: Any, gpu_bytes: Optional[int] = None) -> Path:
    from omegaconf import OmegaConf

    a = ctx.config.astuner
    if a.task_reader.task_selector.selector_type not in ("sequential", "shuffle") or \
            a.data_processor.experience_pipeline.operators:
        raise ConfigError("backbone verl serves tasks with its own sampler: task selectors other than sequential / "
                          "shuffle and experience operators are not supported there; use --backbone debug or trinity")
    from astuner.backbone.runtime import write_rows
    from astuner.backbone.translate_common import user_verl_keys
    from astuner.backbone.verl_backbone.translate import agent_loop_registry, translate_to_verl, verl_task_row
    from astuner.model_path import resolve_model_path
    from astuner.task_reader import build_task_reader

    root = ctx.run_dir.root.absolute()
    reader = build_task_reader(a, ctx.config.extra_roots)
    train_tasks = reader.train_tasks()
    check_batching(ctx.config, len(train_tasks))
    model_path = resolve_model_path(a, ctx.config.extra_roots)
    check_memory(ctx.config, model_path, gpu_bytes, user_verl_keys(ctx.config.merged))
    n_train = write_rows((verl_task_row(t, i) for i, t in enumerate(train_tasks)), root / "verl_data" / "train.jsonl")
    n_val = write_rows((verl_task_row(t, i) for i, t in enumerate(reader.val_tasks())), root / "verl_data" / "test.jsonl")
    (root / "verl_agent_loops.yaml").write_text(yaml.safe_dump(agent_loop_registry(ctx.config, root), sort_keys=False))
    config = compose_verl_config(translate_to_verl(ctx.config, root, model_path=model_path, validation=n_val > 0))
    path = root / CONFIG_FILE
    path.write_text(OmegaConf.to_yaml(config), encoding="utf-8")
    logger.info(f"verl: {n_train} training / {n_val} validation tasks, model {model_path}, config {path}")
    return path


def check_available() -> None:
    verl_config_dir()


def run(ctx: Any) -> None:
    check_available()
    from astuner.backbone.ray_cluster import ensure_ray

    from astuner.backbone.verl_backbone.translate import cpu_mode

    cpu = cpu_mode(ctx.config)
    path = prepare(ctx, None if cpu else gpu_memory())
    tc = ctx.config.astuner.trainer_common
    cluster = ensure_ray(ctx.with_ray, logical_gpus=tc.nnodes * tc.n_gpus_per_node if cpu else None)
    try:
        from omegaconf import OmegaConf
        from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        from verl.utils.device import auto_set_device

        config = OmegaConf.load(path)
        auto_set_device(config)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
        if config.trainer.use_v1:
            run_ppo(config, task_runner_class=TaskRunnerV1)
        else:
            from verl.trainer.main_ppo_v0 import TaskRunner

            run_ppo(config, task_runner_class=TaskRunner)
    finally:
        cluster.stop()
