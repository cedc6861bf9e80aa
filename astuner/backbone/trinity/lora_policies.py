"""Several policies on Trinity-RFT: LoRA adapters of one base model, in one trainer and one vLLM engine.

Trinity-RFT 0.6 trains one adapter (verl's FSDP LoRA names it `default`; its validator accepts one `lora_configs`
entry; its engine serves one `LoRARequest`). With `astuner.policies` on the trinity backbone each learning policy is
an adapter of its own, named after it, beside that `default` (kept, never trained: verl's weight export reads its
settings). Loaded through verl's plug-in hook (`VERL_USE_EXTERNAL_MODULES`, set for the run's Ray workers with the
policies in `ENV`), so both Trinity's trainer actor and its FSDP workers apply it; Trinity's and verl's files stay
as they are. What it changes:

- the model verl builds: one adapter per learning policy (the `default` adapter's LoRA settings, its own random
  init), each trainable, `default` not (`add_policy_adapters`);
- the update (Trinity's `VERLTrainer._update_actor`, the trainer actor): the step's batch split by the policy each
  experience names (`eid.suffix`, set by the workflow), one `update_actor` call per policy with samples, its
  adapter made the active and only trainable one in each FSDP worker for that call (`select_adapter`). Other
  adapters take no part: no gradient, so AdamW leaves them as they are; the gradient clip is each policy's own; the learning-rate
  schedule advances once per step, not once per policy (`_keep_schedule`);
- the adapters saved with each checkpoint: `actor/lora_adapter/<policy>/` each (peft's format), and the first
  policy's at `actor/lora_adapter/` as well, which Trinity's engine re-adds at each weight sync. verl's own
  checkpoint (the model with every adapter, the optimizer's state of each, the schedule) is what a resume loads.

The explorer side needs no patch: the workflow (`workflow.py`) sends each agent's calls with its policy's
`LoRARequest` (`policy_request`), and the engine is started with a slot per adapter (`widen_lora_slots`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from astuner.backbone.cpu_hooks import FSDP_ENGINE, after_import

ENV = "ASTUNER_TRINITY_POLICIES"  # JSON list: the learning policies, in the config's order
MODULE = "astuner.backbone.trinity.lora_policies"
POLICY_KEY, KEEP_SCHEDULE_KEY = "astuner_policy", "astuner_keep_schedule"
_ADAPTER = re.compile(r"\.lora_[A-Za-z_]+\.([^.]+)(?:\.|$)")  # peft's `...lora_A.<adapter>.weight`


def env_policies() -> list[str]:
    return list(json.loads(os.environ.get(ENV) or "[]"))


def policies_env(learners: list[str]) -> dict[str, str]:
    return {ENV: json.dumps(list(learners))} if learners else {}


# --- the explorer side (our vLLM engine settings; the requests: engine.policy_request) ---

def widen_lora_slots(trinity_config: Any, learners: list[str]) -> None:
    """One vLLM adapter slot per learning policy, plus Trinity's own adapter (which its weight sync re-adds):
    Trinity's validator sizes `max_loras` from its one `lora_configs` entry."""
    if learners:
        kwargs = trinity_config.explorer.rollout_model.lora_kwargs
        kwargs["max_loras"] = len(learners) + 1


# --- the trainer side (Trinity's trainer actor and its FSDP workers) ---

def adapter_of(name: str) -> Optional[str]:
    found = _ADAPTER.search(name)
    return found.group(1) if found else None


def add_policy_adapters(module: Any, learners: list[str]) -> Any:
    """An adapter per learning policy on the peft model verl built, with `default`'s settings; only theirs train."""
    import copy

    settings = module.peft_config["default"]
    for policy in learners:
        if policy not in module.peft_config:
            module.add_adapter(policy, copy.deepcopy(settings))
    select_adapter(module, learners[0])
    # every learner's parameters trainable while the model is built: Trinity casts those to FSDP's dtype then
    for name, param in module.named_parameters():
        adapter = adapter_of(name)
        if adapter is not None:
            param.requires_grad_(adapter in learners)
    return module


def select_adapter(module: Any, policy: str) -> None:
    """`policy`'s adapter is the one every LoRA layer applies, and the only one whose parameters take a gradient
    (peft's per-layer `set_adapter`). Made before every update: verl's reference pass (`disable_adapter()`) leaves
    only the adapter active at that time trainable when it ends."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    model = getattr(module, "_fsdp_wrapped_module", module)
    for layer in model.modules():
        if isinstance(layer, BaseTunerLayer):
            layer.set_adapter(policy)
    base = getattr(model, "base_model", None)
    if base is not None and hasattr(base, "active_adapter"):
        base.active_adapter = policy


def policy_rows(unique_ids: Any, learners: list[str]) -> dict[str, list[int]]:
    """Each learning policy's rows of a batch: the policy an experience names is its uid's last part (eid.suffix);
    padding rows and experiences of no learning policy belong to none."""
    rows: dict[str, list[int]] = {policy: [] for policy in learners}
    for index, uid in enumerate(unique_ids):
        policy = str(uid).rsplit("/", 1)[-1]
        if policy in rows:
            rows[policy].append(index)
    return rows


def padded_rows(rows: list[int], divisor: int) -> tuple[list[int], int]:
    """`rows` repeated up to a multiple of the data-parallel size (verl splits a batch evenly over its ranks);
    returns the indices and how many were added, which take no loss (`mask_rows`)."""
    extra = -len(rows) % divisor
    return rows + [rows[i % len(rows)] for i in range(extra)], extra


def mask_rows(batch: Any, count: int) -> None:
    """The last `count` rows of a DataProto take no loss: no response token counts."""
    if count:
        for key in ("response_mask", "loss_mask"):
            if key in batch.batch.keys():
                batch.batch[key][-count:] = 0


def split_update(trainer_module: Any) -> None:
    """Trinity's `VERLTrainer._update_actor`, once per learning policy that has samples in the step."""
    cls = trainer_module.VERLTrainer
    if getattr(cls._update_actor, "astuner_policies", False):
        return

    def _update_actor(self: Any, batch: Any, metrics: dict) -> Any:
        learners = env_policies()
        rows = policy_rows(batch.non_tensor_batch["unique_ids"], learners)
        present = [policy for policy in learners if rows[policy]]
        merged: dict[str, list[float]] = {}
        for position, policy in enumerate(present):
            indices, extra = padded_rows(rows[policy], self._get_dp_size())
            part = batch.select_idxs(indices)
            mask_rows(part, extra)
            part.meta_info = {**batch.meta_info, POLICY_KEY: policy,
                              KEEP_SCHEDULE_KEY: position < len(present) - 1}
            own: dict[str, Any] = {}
            update_policy(self, part, own)
            for key, value in own.items():
                metrics[f"policy/{policy}/{key}"] = value
                merged.setdefault(key, []).append(value)
        metrics.update({key: sum(values) / len(values) for key, values in merged.items()})
        return batch

    _update_actor.astuner_policies = True  # type: ignore[attr-defined]
    cls._update_actor = _update_actor


def update_policy(trainer: Any, part: Any, metrics: dict) -> None:
    """Trinity's `_update_actor` on one policy's rows: one optimizer step over them (their own mini-batch), with
    the policy named to the workers."""
    from trinity.trainer.verl.trainer import left_right_2_no_padding, reduce_metrics, rename_dict, tu

    batch_td = left_right_2_no_padding(part.to_tensordict())
    size = len(part)
    tu.assign_non_tensor(
        batch_td, calculate_entropy=trainer.algorithm_config.entropy_loss_fn != "none", global_batch_size=size,
        mini_batch_size=size, epochs=trainer.config.actor.ppo_epochs, seed=trainer.config.actor.data_loader_seed,
        dataloader_kwargs={"shuffle": trainer.config.actor.shuffle},
        temperature=part.meta_info.get("temperature", trainer.global_config.model.temperature), compute_loss=True,
        **{POLICY_KEY: part.meta_info[POLICY_KEY], KEEP_SCHEDULE_KEY: part.meta_info[KEEP_SCHEDULE_KEY]})
    output = rename_dict(tu.get(trainer.actor_rollout_wg.update_actor(batch_td), "metrics"), "actor/")
    if "actor/mfu" in output:
        output["perf/mfu/actor"] = output.pop("actor/mfu")
    metrics.update(reduce_metrics(output))


def _keep_schedule(engine: Any) -> Any:
    """The learning-rate schedule's state and the optimizer's rates, to put back after an update that is not the
    step's last (verl advances the schedule at the end of each update call)."""
    scheduler = getattr(engine, "lr_scheduler", None)
    if scheduler is None:
        return None
    return scheduler.state_dict(), [group["lr"] for group in engine.optimizer.param_groups]


def adapter_per_update(workers: Any) -> None:
    """verl's `TrainingWorker.train_mini_batch` applies the adapter of the policy its batch names."""
    from verl.utils import tensordict_utils as tu

    cls = workers.TrainingWorker
    original = cls.train_mini_batch
    if getattr(original, "astuner_policies", False):
        return

    def train_mini_batch(self: Any, data: Any) -> Any:
        policy = tu.pop(data, key=POLICY_KEY, default=None)
        keep = tu.pop(data, key=KEEP_SCHEDULE_KEY, default=False)
        if policy is None:
            return original(self, data)
        select_adapter(self.engine.module, policy)
        saved = _keep_schedule(self.engine) if keep else None
        try:
            return original(self, data)
        finally:
            if saved is not None:
                self.engine.lr_scheduler.load_state_dict(saved[0])
                for group, lr in zip(self.engine.optimizer.param_groups, saved[1]):
                    group["lr"] = lr

    for attribute, value in vars(original).items():  # verl's dispatch registration
        setattr(train_mini_batch, attribute, value)
    train_mini_batch.astuner_policies = True  # type: ignore[attr-defined]
    cls.train_mini_batch = train_mini_batch


def adapters_at_build(fsdp_engine: Any) -> None:
    """verl's `_build_lora_module` adds the policies' adapters (before FSDP wraps the model and the optimizer is
    built over its parameters). Trinity wraps this method again at init (its dtype alignment), after ours."""
    for value in list(vars(fsdp_engine).values()):
        if isinstance(value, type) and "_build_lora_module" in value.__dict__:
            original = value._build_lora_module
            if getattr(original, "astuner_policies", False):
                continue

            def build(engine: Any, module: Any, _original: Any = original) -> Any:
                return add_policy_adapters(_original(engine, module), env_policies())

            build.astuner_policies = True  # type: ignore[attr-defined]
            value._build_lora_module = build


def save_policy_adapters(self: Any, local_path: str) -> None:
    """Each learning policy's adapter beside the checkpoint (`lora_adapter/<policy>/`), and the first's at
    `lora_adapter/` (Trinity's engine re-adds that one at each weight sync). Only the adapters' parameters are
    gathered (each whole: DTensor.full_tensor on every rank)."""
    import torch
    from peft.utils.save_and_load import get_peft_model_state_dict
    from safetensors.torch import save_file

    model = self.actor.engine.module
    peft_model = getattr(model, "_fsdp_wrapped_module", model)
    state = {}
    for name, param in model.named_parameters():
        if adapter_of(name) is not None:
            whole = param.full_tensor() if hasattr(param, "full_tensor") else param
            state[name] = whole.detach().cpu()
    if torch.distributed.get_rank() == 0:
        learners = env_policies()
        for folder, policy in [(Path(local_path) / "lora_adapter" / p, p) for p in learners] + \
                              [(Path(local_path) / "lora_adapter", learners[0])]:
            folder.mkdir(parents=True, exist_ok=True)
            weights = get_peft_model_state_dict(peft_model, state_dict=state, adapter_name=policy)
            save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "adapter_model.safetensors"))
            (folder / "adapter_config.json").write_text(json.dumps(adapter_settings(peft_model.peft_config[policy]),
                                                                   indent=2), encoding="utf-8")
    torch.distributed.barrier()


def adapter_settings(config: Any) -> dict[str, Any]:
    """A peft LoraConfig as its adapter_config.json."""
    out = asdict(config)
    for key, value in out.items():
        if hasattr(value, "value"):  # enums: task_type, peft_type
            out[key] = value.value
        elif isinstance(value, (set, frozenset)):
            out[key] = sorted(value)
    return out


def adapters_saved(trinity_workers: Any) -> None:
    trinity_workers.TrinityActorRolloutRefWorker._save_lora = save_policy_adapters


def install() -> None:
    if not env_policies():
        return
    after_import(FSDP_ENGINE, adapters_at_build)
    after_import("verl.workers.engine_workers", adapter_per_update)
    after_import("trinity.trainer.verl.workers", adapters_saved)
    after_import("trinity.trainer.verl.trainer", split_update)


install()
