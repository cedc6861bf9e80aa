"""The debug backbone's learner: the policy slots (the one policy of `astuner.model`, or several with
`astuner.policies`: one slot is the one-policy case of several), their updates on the experience a source hands
over, the weights pushed to the engines, and the checkpoints.

The algorithm of a step (`learn`, then `push_weights`):
  for each learning policy, in the config's order (a resumed run updates them the same way):
    1. its samples (with one policy: all of the step's);
    2. with `algorithm.drop_zero_variance_groups`, the groups (its samples of one task, or of one agent on one
       task: `algorithm.adv_group`) whose rewards are all equal are dropped (they carry no signal) and counted;
    3. advantages over the remaining groups (`algorithm.adv_estimator`: GRPO's group-normalised reward, ...);
    4. `PolicyTrainer.update`: the PPO-clipped surrogate against the old policy's log-probs, an optional KL to
       the frozen initial policy, an entropy bonus (`policy.py`);
  then every learning policy's weights go to its engine: the engines sample version `version` + 1 from then on.
A sample carries the version that generated it (`Sample.policy_version`); with the synchronous source every
sample of a step is of the current version. With the off-policy source (`pipeline.py`) it may be older: step 4
then weights each token by pi_old / pi_behaviour, capped (`trainer_common.off_policy.is_cap`), and the weights
reach the producer's engine as a snapshot (`pipeline.weight_snapshot`) at the version boundary it waits for.
"""

from __future__ import annotations

import copy
import statistics
from typing import Any, Callable, Optional

from loguru import logger

from astuner.algorithm.advantages import assign_advantages, group_key, zero_variance_groups
from astuner.errors import ConfigError, DataError
from astuner.backbone.debug.checkpoint import save_checkpoint
from astuner.backbone.debug.resume import check_saved_policy


class Learner:
    def __init__(self, cfg: Any, model_path: str, tokenizer: Any, pad_id: int, device: str, dtype: str,
                 checkpoint: Any, checkpoints: Any, extra_roots: Any, run_async: Callable[[Any], Any]):
        """`checkpoint`: the checkpoint a resumed run loads (None: a new run); `checkpoints`: the run's checkpoint
        folder; `run_async`: runs a coroutine on the run's event loop (the engines')."""
        self.cfg, self.model_path, self.tokenizer, self.pad_id = cfg, model_path, tokenizer, pad_id
        self.dtype, self.checkpoint, self.checkpoints = dtype, checkpoint, checkpoints
        self.extra_roots, self.run_async = extra_roots, run_async
        self.version = 0  # the engines' weights: the learner's steps so far (a resumed run: its checkpoint's step)
        if cfg.policies:
            self._setup_policies(device)
        else:
            self._setup_one_policy(device)
        self.engine = next(iter(self.slots.values())).engine

    def _setup_one_policy(self, device: str) -> None:
        """astuner.model: the run's one policy (checkpoint folder model/)."""
        from astuner.backbone.debug.policies import PolicySlot
        from astuner.backbone.debug.policy import PolicyTrainer
        from astuner.model.engines.factory import build_engine, pick_engine

        cfg, tc = self.cfg, self.cfg.trainer_common
        self.model = self._load_policy(self.checkpoint / "model" if self.checkpoint else None, device, trainable=True)
        self.model.eval()
        reference = None
        if tc.algorithm.use_kl_loss:  # frozen: held in the compute dtype (half the memory under bf16)
            warm = self.checkpoints / "global_step_0" / "model"  # after the SFT warm start, if any
            if cfg.model.lora is not None and tc.sft.steps == 0:
                from astuner.backbone.debug.lora import AdapterDisabled

                reference = AdapterDisabled(self.model)  # the base model itself: no second copy of the weights
            else:
                reference = self._frozen_copy(self.model, self.checkpoint is not None, device,
                                              warm if warm.is_dir() else None)
        self.policy = PolicyTrainer(self.model, self.pad_id, tc, reference)
        self.engine = build_engine(cfg, self.tokenizer, model=self.model, model_path=self.model_path)
        self.shares_weights = getattr(self.engine, "model", None) is self.model
        from astuner.backbone.debug.lora import tied_embedding_adapted

        if not self.shares_weights and tied_embedding_adapted(self.model):
            raise ConfigError(f"astuner.model.lora.target_modules adapts the output head or input embedding of "
                              f"{self.model_path}, whose two are one matrix (tied); the {pick_engine(cfg)} engine loads "
                              f"them tied, so leave both out of target_modules or use engine hf")
        self.slots = {"default": PolicySlot("default", self.model, self.engine, self.policy, "model",
                                            self.shares_weights)}
        if self.checkpoint is not None and not self.shares_weights:  # the engine loaded the initial weights
            self.run_async(self.engine.update_weights(self.engine_weights()))

    def _setup_policies(self, device: str) -> None:
        """astuner.policies, in the config's order: a model and (when it learns) a trainer per policy; LoRA policies
        on one base share it (one peft model, an adapter each, one hf engine sampling each call with its adapter),
        the others have a model and engine of their own. Learning policies resume from policies/<name>/."""
        import torch

        from astuner.backbone.debug import lora
        from astuner.backbone.debug.policies import (PolicySlot, adapter_names_problem, check_supported, policy_lora,
                                                     policy_seed, policy_trainer_config, same_vocabulary)
        from astuner.backbone.debug.policy import PolicyTrainer
        from astuner.model.engines.factory import build_engine, load_tokenizer, pick_engine
        from astuner.model.engines.hf import AdapterRoute
        from astuner.model.model_path import resolve_local_model

        cfg, tc = self.cfg, self.cfg.trainer_common
        problem = check_supported(cfg, pick_engine(cfg), self.extra_roots)
        if problem:
            raise ConfigError(problem)
        where: dict[str, tuple[str, Any]] = {}  # policy -> (its base model, its LoRA settings or None)
        from astuner.model.model_path import _tiny_corpus

        roots = list(self.extra_roots)
        for name, pc in cfg.policies.items():
            if pc.path is None:  # a copy of astuner.model: its LoRA unless the policy sets its own
                where[name] = (self.model_path, policy_lora(cfg, name))
                continue
            key = f"astuner.policies.{name}"
            path = resolve_local_model(pc.path, pc.tiny, f"{key}.path", roots, lambda: _tiny_corpus(cfg, roots))
            if not same_vocabulary(load_tokenizer(path, f"{key}.path"), self.tokenizer):
                raise ConfigError(f"{key}.path: {path} has another tokenizer (or chat template) than "
                                  f"astuner.model.path {self.model_path}; the policies of a run share one")
            where[name] = (path, policy_lora(cfg, name))
        lora_bases = [path for path, lora_cfg in where.values() if lora_cfg is not None]
        shared: dict[str, Any] = {}  # base path -> the peft model its LoRA policies share
        self.slots = {}
        for name, pc in cfg.policies.items():
            path, lora_cfg = where[name]
            folder = f"policies/{name}"
            saved = self.checkpoint / folder if self.checkpoint is not None and pc.trainable else None
            seed = policy_seed(tc.seed, name)  # a LoRA adapter's initialisation, per policy
            adapter = name if lora_cfg is not None and lora_bases.count(path) > 1 else None
            if adapter is not None:
                model = shared.get(path)
                if model is None:
                    model = self._load_policy(None, device, False, base=path, lora_cfg=None)
                    # the loaded model's own parameter names, which its safetensors may not all show (tied weights)
                    weights = list(model.state_dict())
                    problem = adapter_names_problem([n for n, w in where.items() if w[0] == path and w[1] is not None],
                                                    lambda _: weights)
                    if problem:
                        raise ConfigError(problem)
                if saved is not None:
                    model = lora.load_adapter(model, saved, pc.trainable, name)
                else:
                    model = lora.add_adapter(model, lora_cfg, seed, name)
                shared[path] = model
            else:
                torch.manual_seed(seed)
                model = self._load_policy(saved, device, pc.trainable, base=path, lora_cfg=lora_cfg, seed=seed)
                if not pc.trainable:
                    model.requires_grad_(False)
            model.eval()
            trainer = None
            if pc.trainable:
                own = policy_trainer_config(tc, pc)
                reference = None
                if own.algorithm.use_kl_loss:  # the policy's initial weights, frozen
                    if lora_cfg is not None:
                        reference = lora.AdapterDisabled(model)  # the base: its adapter starts at B = 0
                    else:
                        reference = self._frozen_copy(model, saved is not None, device, base=path, lora_cfg=None)
                trainer = PolicyTrainer(model, self.pad_id, own, reference, adapter=adapter,
                                        params=lora.adapter_parameters(model, name) if adapter else None)
            self.slots[name] = PolicySlot(name, model, None, trainer, folder, True, adapter)
        engines: dict[int, Any] = {}  # one hf engine per model (a shared base's serves all its adapters)
        for name, slot in self.slots.items():
            path = where[name][0]
            engine = engines.get(id(slot.model))
            if engine is None:
                engine = engines[id(slot.model)] = build_engine(cfg, self.tokenizer, model=slot.model, model_path=path,
                                                                seed=policy_seed(cfg.rollout.seed, name))
            slot.engine = AdapterRoute(engine, slot.adapter) if slot.adapter else engine
            slot.shares_weights = getattr(engine, "model", None) is slot.model
        for slot in self.slots.values():  # a frozen adapter on a shared base: no gradient ever reaches it
            if slot.adapter and not slot.learns:
                for param in lora.adapter_parameters(slot.model, slot.name):
                    param.requires_grad_(False)
        first = next(iter(self.slots.values()))
        self.model, self.policy = first.model, first.trainer
        self.shares_weights = all(slot.shares_weights for slot in self.slots.values())

    def _frozen_copy(self, model: Any, resumed: bool, device: str, folder: Optional[Any] = None,
                     base: Optional[str] = None, lora_cfg: Any = "model") -> Any:
        """A KL reference: the policy's initial weights, frozen, in the compute dtype (half the memory under bf16);
        `model` copied on a new run, loaded (from `folder`, else the base) on a resumed one."""
        import torch

        reference = (self._load_policy(folder, device, False, base=base, lora_cfg=lora_cfg) if resumed
                     else copy.deepcopy(model))
        reference.eval().requires_grad_(False)
        if self.dtype == "bf16":
            reference.to(torch.bfloat16)
        return reference

    def engines(self) -> dict[str, Any]:
        return {name: slot.engine for name, slot in self.slots.items()}

    def models_line(self) -> str:
        if not self.cfg.policies:
            return f"model {self.model_path}"
        return "policies " + ", ".join(f"{name} ({'trainable' if slot.learns else 'frozen'}"
                                       f"{', LoRA adapter on a shared base' if slot.adapter else ''})"
                                       for name, slot in self.slots.items())

    def _load_policy(self, folder: Optional[Any], device: str, trainable: bool, base: Optional[str] = None,
                     lora_cfg: Any = "model", seed: Optional[int] = None) -> Any:
        """The policy from `base` (default model.path), or from a checkpoint's folder (a whole model, or with
        LoRA (`lora_cfg`, default model.lora) the adapter over base's weights); with LoRA a fresh adapter when no
        folder."""
        import torch
        from transformers import AutoModelForCausalLM

        from astuner.backbone.debug import lora

        lora_cfg = self.cfg.model.lora if lora_cfg == "model" else lora_cfg
        base = base or self.model_path
        adapter = folder is not None and lora.is_adapter_folder(folder)
        if folder is not None:
            check_saved_policy(folder, lora_cfg)
        weights = base if folder is None or adapter else str(folder)
        try:
            model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32).to(device)
        except Exception as exc:  # noqa: BLE001 - OSError, safetensors' and transformers' errors on a bad folder
            first = (str(exc).strip().splitlines() or [""])[0][:150]
            raise DataError(f"astuner.model.path: cannot load a model from {weights!r} ({type(exc).__name__}: {first})") \
                from None
        if lora_cfg is None:
            return model
        if adapter:
            model = lora.load_adapter(model, folder, trainable)
        else:
            model = lora.add_adapter(model, lora_cfg, self.cfg.trainer_common.seed if seed is None else seed)
        if trainable:
            count, total = lora.trainable_counts(model)
            logger.info(f"LoRA rank {lora_cfg.rank}, alpha {lora_cfg.alpha:g} on {lora_cfg.target_modules}: {count:,} "
                        f"trainable of {total:,} parameters ({100 * count / total:.2f}%)")
        return model

    def engine_weights(self, slot: Any = None) -> Any:
        """What the engine loads after an update: nothing when it shares the policy module, else the policy's
        weights as the base model names them (with LoRA, merged)."""
        slot = slot or next(iter(self.slots.values()))
        if slot.shares_weights:
            return None
        from astuner.backbone.debug.lora import merged_state_dict

        return merged_state_dict(slot.model)

    # -- a step -------------------------------------------------------------------------------------
    def learn(self, samples: list[Any], temperature: float, is_cap: Optional[float] = None,
              anchor: str = "learner") -> tuple[dict[str, float], list[Any], int]:
        """The step's update of every learning policy: its metrics, the samples trained on, the groups dropped.
        `is_cap`, `anchor`: the samples may be off-policy (`PolicyTrainer.update`)."""
        several = bool(self.cfg.policies)
        metrics: dict[str, float] = {}
        trained: list[Any] = []
        dropped_groups = 0
        for name, slot in self.slots.items():
            own = [s for s in samples if s.policy == name] if several else samples
            if not slot.learns:
                continue
            al = slot.trainer.cfg.algorithm
            prefix = f"policy/{name}/" if several else ""
            if several and own:
                metrics[f"{prefix}reward/mean"] = statistics.fmean(s.reward for s in own)
            dropped: set[str] = set()
            if al.drop_zero_variance_groups:
                dropped = zero_variance_groups(own, al.adv_group)
                own = [s for s in own if group_key(s, al.adv_group) not in dropped]
            dropped_groups += len(dropped)
            assign_advantages(own, al.adv_estimator, al.norm_adv_by_std_in_grpo, al.adv_epsilon, al.step_norm,
                              al.adv_group)
            if own:
                metrics.update({prefix + k: v for k, v in slot.trainer.update(own, temperature, is_cap, anchor).items()})
            if several:
                metrics[f"{prefix}train/samples"] = float(len(own))
            trained += own
        return metrics, trained, dropped_groups

    def push_weights(self) -> None:
        """Every learning policy's weights to its engine: the next version."""
        for slot in self.slots.values():
            if slot.learns:
                self.run_async(slot.engine.update_weights(self.engine_weights(slot)))
        self.version += 1

    def took_warm_start(self) -> None:
        """After the SFT warm start trained the policy: its weights to the engine, and to the KL reference."""
        self.run_async(self.engine.update_weights(self.engine_weights()))
        if self.policy.reference is not None:
            self.policy.reference.load_state_dict(self.model.state_dict())

    # -- checkpoints --------------------------------------------------------------------------------
    def restore(self, state: dict[str, Any]) -> None:
        """The optimizers of a resumed run (its weights were loaded with the slots), and its version."""
        for name, slot in self.slots.items():
            if slot.learns:
                own = state if slot.folder == "model" else state["policies"][name]
                slot.trainer.optimizer.load_state_dict(own["optimizer"])
                slot.trainer.optimizer_steps = own["optimizer_steps"]
        self.version = state["step"]

    def save(self, step: int, state: dict[str, Any]) -> None:
        """Checkpoint `step`: the learning policies' weights and optimizers, with the run's `state` (the selector's,
        the engines' sampling RNG)."""
        if not self.cfg.policies:
            state = {"optimizer": self.policy.optimizer.state_dict(), "optimizer_steps": self.policy.optimizer_steps,
                     **state}
            models: Any = self.model
        else:  # the learning policies' weights and optimizers; a frozen one has neither
            learning = {name: slot for name, slot in self.slots.items() if slot.learns}
            state = {"policies": {name: {"optimizer": slot.trainer.optimizer.state_dict(),
                                         "optimizer_steps": slot.trainer.optimizer_steps}
                                  for name, slot in learning.items()}, **state}
            from astuner.backbone.debug.lora import OneAdapter

            models = {slot.folder: OneAdapter(slot.model, slot.adapter) if slot.adapter else slot.model
                      for slot in learning.values()}
        save_checkpoint(self.checkpoints, step, models, self.tokenizer, state,
                        self.cfg.trainer_common.max_checkpoints_to_keep)
