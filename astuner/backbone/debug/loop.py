"""The debug backbone's training loop: one process, no Ray, CPU (fp32) or one GPU (bf16).

Per step: select `data.train_batch_size` tasks, roll out `num_repeat` episodes each, judge, build
samples, compute advantages, update the policy, push the weights to the engine, record.
"""

from __future__ import annotations

import asyncio
import copy
import random
import signal
import statistics
import time
from typing import Any, Optional

from loguru import logger

from astuner.algorithm.advantages import assign_advantages, zero_variance_groups
from astuner.errors import ConfigError, DataError
from astuner.model.model_path import resolve_model_path
from astuner.model.precision import compute_dtype
from astuner.records.metrics import MetricsWriter, plot_reward_curve, write_trajectories
from astuner.records.tokens import TokenPieces, token_record, write_token_records
from astuner.rollout.manager import RolloutBatch, RolloutManager, build_judge
from astuner.rollout.row_problems import RowProblems
from astuner.backbone.debug.trajectories import episode_row
from astuner.backbone.debug.resume import check_resume, check_saved_policy
from astuner.backbone.debug.checkpoint import (latest_checkpoint, load_trainer_state, restore_rng, rng_state,
                                        save_checkpoint)


class DebugTrainer:
    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.cfg = ctx.config.astuner
        self.run_dir = ctx.run_dir
        self.stop_requested = False
        self.row_problems = RowProblems()  # tasks whose rows lack what the workflow or judge read
        self.trained_steps = 0  # steps of this session whose update had samples
        # one event loop for the whole run: in-process engines (vLLM) keep background tasks on it
        self.loop = asyncio.new_event_loop()

    def _await(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    # -- setup -------------------------------------------------------------------------------------
    def _setup(self) -> None:
        import torch

        from astuner.data.selector import build_selector
        from astuner.model.engines.factory import load_tokenizer, pick_engine
        from astuner.task_reader import build_task_reader

        cfg, tc = self.cfg, self.cfg.trainer_common
        torch.manual_seed(tc.seed)
        random.seed(tc.seed)
        if pick_engine(cfg) == "openai":
            raise ConfigError("astuner.rollout.engine openai serves a fixed model and cannot be trained by the debug "
                              "backbone; use engine hf (or vllm on a GPU)")
        device = tc.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("astuner.trainer_common.device is cuda but no GPU is visible; use device: cpu")
        # fp32 weights and optimizer state always; bf16 (astuner.model.precision) is the forward passes' compute dtype
        self.dtype = compute_dtype(tc.dtype, device)
        self.model_path = resolve_model_path(cfg, self.ctx.config.extra_roots)
        self.tokenizer = load_tokenizer(self.model_path)
        self._pieces = TokenPieces(self.tokenizer)
        self.checkpoint = latest_checkpoint(self.run_dir.checkpoints) if self.run_dir.resumed else None
        if self.checkpoint is not None:  # (checked before the run folder was touched too: DebugBackbone.check_resume)
            check_resume(cfg, self.run_dir.checkpoints)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.tokenizer.eos_token_id
        if cfg.policies:
            self._setup_policies(device)
        else:
            self._setup_one_policy(device)
        self.engine = next(iter(self.slots.values())).engine
        reader = build_task_reader(cfg, self.ctx.config.extra_roots)
        self.train_tasks = reader.train_tasks()
        self.val_tasks = reader.val_tasks()
        sel = cfg.task_reader.selector
        try:
            self.selector = build_selector(sel.selector_type, self.train_tasks, sel.seed, sel.feature_keys, sel.kwargs)
        except ValueError as exc:
            raise DataError(f"astuner.task_reader.task_selector: {exc}") from None
        self.judge = build_judge(self.ctx.plugins.judge, cfg)
        from astuner.model.auxiliary import config_auxiliary_models

        # the config's frozen models, then tune()'s (which win on a shared name)
        auxiliary = {**config_auxiliary_models(cfg, self.ctx.config.extra_roots),
                     **(getattr(self.ctx, "auxiliary_models", None) or {})}
        self.manager = RolloutManager(cfg, self.ctx.plugins.workflow, self.judge, self.engine, self.tokenizer,
                                      auxiliary_models=auxiliary,
                                      engines={name: slot.engine for name, slot in self.slots.items()},
                                      row_problems=self.row_problems)
        steps_per_epoch = self.selector.steps_per_epoch(cfg.data.train_batch_size)
        self.total_steps = tc.total_training_steps or tc.total_epochs * steps_per_epoch
        from astuner.records.monitors import open_monitors

        self.writer = MetricsWriter(self.run_dir.root, self.run_dir.tensorboard, "tensorboard" in tc.logger,
                                    # beside tensorboard/: the run folder, or monitor/ in tune()'s layout
                                    open_monitors(tc.logger, cfg.project_name, self.ctx.config.experiment_name,
                                                  self.run_dir.tensorboard.parent, self.ctx.config.merged))
        self.start_step = 0
        if self.checkpoint is not None:
            state = load_trainer_state(self.checkpoint)
            for name, slot in self.slots.items():
                if slot.learns:
                    own = state if slot.folder == "model" else state["policies"][name]
                    slot.trainer.optimizer.load_state_dict(own["optimizer"])
                    slot.trainer.optimizer_steps = own["optimizer_steps"]
            self.selector.load_state_dict(state["selector"])
            restore_rng(state["rng"], self._engines())
            self.start_step = state["step"]
            self.writer.truncate_after(self.start_step)
            logger.info(f"resumed from {self.checkpoint} (step {self.start_step} of {self.total_steps})")
        elif self.run_dir.resumed:  # the earlier run died before its first checkpoint: it starts over
            self.writer.truncate_after(-1)
            logger.warning(f"--resume: {self.run_dir.checkpoints} holds no complete checkpoint; starting from step 0 "
                           f"(the earlier run's metric rows are cleared)")
        logger.info(f"debug backbone: {self._models_line()} on {device} ({self.dtype} compute, fp32 weights), "
                    f"engine {type(getattr(self.engine, 'engine', self.engine)).__name__}, {len(self.train_tasks)} training / {len(self.val_tasks)} "
                    f"validation tasks, {self.total_steps} steps of {cfg.data.train_batch_size} tasks x "
                    f"{cfg.rollout.num_repeat} episodes")

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
            warm = self.run_dir.checkpoints / "global_step_0" / "model"  # after the SFT warm start, if any
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
            self._await(self.engine.update_weights(self._engine_weights()))

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
        problem = check_supported(cfg, pick_engine(cfg), self.ctx.config.extra_roots)
        if problem:
            raise ConfigError(problem)
        where: dict[str, tuple[str, Any]] = {}  # policy -> (its base model, its LoRA settings or None)
        from astuner.model.model_path import _tiny_corpus

        roots = list(self.ctx.config.extra_roots)
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

    def _engines(self) -> dict[str, Any]:
        return {name: slot.engine for name, slot in self.slots.items()}

    def _models_line(self) -> str:
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

    def _engine_weights(self, slot: Any = None) -> Any:
        """What the engine loads after an update: nothing when it shares the policy module, else the policy's
        weights as the base model names them (with LoRA, merged)."""
        slot = slot or next(iter(self.slots.values()))
        if slot.shares_weights:
            return None
        from astuner.backbone.debug.lora import merged_state_dict

        return merged_state_dict(slot.model)

    # -- the loop ----------------------------------------------------------------------------------
    def fit(self) -> None:
        from astuner.records.progress import Progress

        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, self._on_sigint)
        try:
            self._setup()
            if self.start_step >= self.total_steps:
                logger.info(f"nothing to do: the run finished its {self.total_steps} steps (checkpoint global_step_"
                            f"{self.start_step}); raise "
                            f"{self.ctx.key_name('astuner.trainer_common.total_training_steps')} to train further")
                return
            if self.checkpoint is None:  # a new run (a resumed one starts after its checkpoint, global_step_0 too)
                self._step_zero()
            bar = Progress(self.total_steps, "RL", initial=self.start_step, every_s=float("inf"))  # lines: _line
            try:
                self._steps(bar)
            finally:
                bar.close()
            self._row_summary()
        finally:
            try:
                self._finish()  # under the trainer's handler: a second Ctrl-C here still stops at once
            finally:
                signal.signal(signal.SIGINT, previous)

    def _steps(self, bar: Any) -> None:
        """The RL steps from the one after start_step: rollouts, update, validation, metrics, checkpoints."""
        from astuner.records.progress import duration

        tc = self.cfg.trainer_common
        last_saved = self.start_step
        for step in range(self.start_step + 1, self.total_steps + 1):
            metrics = self.train_step(step)
            if tc.test_freq > 0 and step % tc.test_freq == 0 and self.val_tasks:
                metrics.update(self.validate(step))
            self.writer.write(step, metrics)
            bar.update(1, reward=f"{metrics['reward/mean']:.3f}", success=f"{metrics['reward/success_rate']:.2f}",
                       madness=f"{metrics.get('rollout/madness_rate', 0.0):.2f}")
            eta = bar.eta()
            logger.info(self._line(step, metrics) + (f" | eta {duration(eta)}" if eta and eta >= 1 and step < self.total_steps
                                                     else ""))
            if (tc.save_freq > 0 and step % tc.save_freq == 0) or step == self.total_steps:
                self.save(step)
                last_saved = step
            if self.stop_requested:
                if last_saved != step:
                    self.save(step)
                logger.warning(f"stopped after step {step} (Ctrl-C); continue with --resume")
                raise KeyboardInterrupt

    def _step_zero(self) -> None:
        """Before the first step of a new run: the warm start (if any), the validation after it (or before training),
        their metric row 0, then with a warm start the checkpoint global_step_0 — saved last, so it holds everything
        step 0 did (weights, the KL reference, the engine's sampler after that validation): a run killed at any point
        after it and resumed is the run that was not killed."""
        tc = self.cfg.trainer_common
        warm = self._warm_start() if tc.sft.steps > 0 else {}
        if (tc.val_before_train or warm) and self.val_tasks:
            warm.update(self.validate(0, "after the warm start" if warm else "before training"))
        if warm:
            self.writer.write(0, warm)
        if tc.sft.steps > 0:
            self.save(0)

    def _warm_start(self) -> dict[str, float]:
        """trainer_common.sft: the expert's demonstrations through the workflow, SFT on them, the weights to
        the engine and the KL reference (this model; `_step_zero` saves it all as global_step_0)."""
        from astuner.errors import RunFailed
        from astuner.backbone.debug import sft

        cfg, s = self.cfg, self.cfg.trainer_common.sft
        out: dict[str, float] = {}
        if self.val_tasks:
            out["sft/val_reward_before"] = self.validate(0, "before the warm start")["val/reward_mean"]
        logger.info(f"SFT warm start: the expert ({self.ctx.config.astuner.trainer_common.sft.expert}) plays "
                    f"{s.demonstrations_per_task} episode(s) of each of the {len(self.train_tasks)} training tasks "
                    f"through the workflow, then {s.steps} SFT steps")
        t0 = time.perf_counter()
        demos = self._await(sft.play(
            lambda engine: RolloutManager(cfg, self.ctx.plugins.workflow, self.judge, engine, self.tokenizer,
                                          row_problems=self.row_problems),
            self.ctx.plugins.expert, self.tokenizer, self.train_tasks, s.demonstrations_per_task, s.min_reward))
        if not demos.samples:
            raise RunFailed(f"astuner.trainer_common.sft: none of the expert's {demos.episodes} episodes scored at "
                            f"least min_reward {s.min_reward} (mean reward {demos.expert_reward:.3f}); fix the expert "
                            f"or lower min_reward")
        t1 = time.perf_counter()
        losses = sft.train(self.model, demos.samples, s.steps, s.lr, s.batch_size, self.cfg.trainer_common.seed,
                           self.pad_id, self.cfg.trainer_common.max_token_len_per_micro_batch, self.dtype,
                           self.cfg.trainer_common.optim.grad_clip)
        t2 = time.perf_counter()
        self._await(self.engine.update_weights(self._engine_weights()))
        if self.policy.reference is not None:
            self.policy.reference.load_state_dict(self.model.state_dict())
        out.update({"sft/demonstrations": float(len(demos.samples)), "sft/expert_episodes": float(demos.episodes),
                    "sft/kept_episodes": float(demos.kept_episodes), "sft/expert_reward": demos.expert_reward,
                    "sft/loss_first": losses[0], "sft/loss_last": losses[-1], "sft/steps": float(len(losses)),
                    "perf/time_sft_demonstrations_s": t1 - t0, "perf/time_sft_s": t2 - t1})
        logger.info(f"SFT warm start: {len(demos.samples)} demonstrations from {demos.kept_episodes}/{demos.episodes} "
                    f"expert episodes (expert reward {demos.expert_reward:.3f}), {len(losses)} steps, loss "
                    f"{losses[0]:.3f} -> {losses[-1]:.3f} in {t2 - t1:.0f} s")
        return out

    def _row_summary(self) -> None:
        """The run's end: the tasks skipped because their rows lack what the workflow or judge read, in one line;
        a run that trained no step because of them fails with that line."""
        summary = self.row_problems.summary()
        if summary is None:
            return
        if self.trained_steps == 0 and self.start_step == 0:
            others = "" if self.row_problems.only_skipped() else "; the other tasks' episodes trained nothing either"
            head = "no step trained: "
            raise DataError(f"{head}{self.row_problems.summary(300 - len(head) - len(others))}{others}")
        logger.warning(summary)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.stop_requested:  # second Ctrl-C: stop now (the last checkpoint and metrics rows stay)
            from astuner.interrupts import stop_at_once

            stop_at_once()
        self.stop_requested = True
        logger.warning("Ctrl-C: finishing the current step, then saving (press again to abandon it)")

    def train_step(self, step: int) -> dict[str, float]:
        cfg = self.cfg
        tasks = self.selector.next_batch(cfg.data.train_batch_size)
        t0 = time.perf_counter()
        batch = self._await(self.manager.run(tasks, "train", tag=f"{self.ctx.config.experiment_name}:train:{step}"))
        t1 = time.perf_counter()
        from astuner.data.operators import apply_operators, selection_metrics

        samples = batch.samples
        selection = selection_metrics(samples)
        samples, operator_metrics = apply_operators(cfg.data_processor.experience_pipeline.operators, samples,
                                                    self.selector.feedback)
        metrics = {**batch.metrics, **selection, **operator_metrics}
        several = bool(cfg.policies)
        trained: list[Any] = []
        dropped_groups = 0
        for name, slot in self.slots.items():  # the config's order: a resumed run updates them the same way
            own = [s for s in samples if s.policy == name] if several else samples
            if not slot.learns:
                continue
            al = slot.trainer.cfg.algorithm
            prefix = f"policy/{name}/" if several else ""
            if several and own:
                metrics[f"{prefix}reward/mean"] = statistics.fmean(s.reward for s in own)
            dropped: set[str] = set()
            if al.drop_zero_variance_groups:  # a group: the policy's samples of one task
                dropped = zero_variance_groups(own)
                own = [s for s in own if s.task_id not in dropped]
            dropped_groups += len(dropped)
            assign_advantages(own, al.adv_estimator, al.norm_adv_by_std_in_grpo, al.adv_epsilon, al.step_norm)
            if own:
                metrics.update({prefix + k: v for k, v in slot.trainer.update(own, cfg.rollout.temperature).items()})
            if several:
                metrics[f"{prefix}train/samples"] = float(len(own))
            trained += own
        samples = trained
        self.trained_steps += bool(samples)
        t2 = time.perf_counter()
        for slot in self.slots.values():
            if slot.learns:
                self._await(slot.engine.update_weights(self._engine_weights(slot)))
        t3 = time.perf_counter()
        lengths = [sum(s.loss_mask) for s in samples] or [0]
        trained_tokens = sum(lengths)
        metrics.update({
            "train/epoch": float(self.selector.epoch),
            "train/tasks": float(len(tasks)),
            "train/samples": float(len(samples)),
            "train/dropped_groups": float(dropped_groups),
            "train/response_length_mean": statistics.fmean(lengths),
            "train/response_length_max": float(max(lengths)),
            "perf/time_rollout_s": t1 - t0,
            "perf/time_update_s": t2 - t1,
            "perf/time_weight_sync_s": t3 - t2,
            "perf/time_step_s": t3 - t0,
            "perf/train_tokens_per_s": trained_tokens / (t2 - t1) if t2 > t1 else 0.0,
        })
        self._trajectories(step, batch)
        return metrics

    def validate(self, step: int, label: Optional[str] = None) -> dict[str, float]:
        batch = self._await(self.manager.run(self.val_tasks, "val", tag=f"{self.ctx.config.experiment_name}:val:{step}"))
        groups = batch.groups()
        out = {"val/reward_mean": batch.metrics["reward/mean"], "val/success_rate": batch.metrics["reward/success_rate"],
               "val/error_rate": batch.metrics["rollout/error_rate"]}
        k = self.cfg.rollout.val_kwargs.num_repeat
        if k > 1:
            out[f"val/pass@{k}"] = sum(any(e.is_success for e in g) for g in groups.values()) / max(len(groups), 1)
        logger.info(f"validation {label or f'at step {step}'}: reward {out['val/reward_mean']:.3f}, "
                    f"success {out['val/success_rate']:.3f} over {len(self.val_tasks)} tasks")
        return out

    def save(self, step: int) -> None:
        if not self.cfg.policies:
            state = {"optimizer": self.policy.optimizer.state_dict(), "optimizer_steps": self.policy.optimizer_steps,
                     "selector": self.selector.state_dict(), "rng": rng_state(self.engine)}
            models: Any = self.model
        else:  # the learning policies' weights and optimizers; a frozen one has neither
            learning = {name: slot for name, slot in self.slots.items() if slot.learns}
            state = {"policies": {name: {"optimizer": slot.trainer.optimizer.state_dict(),
                                         "optimizer_steps": slot.trainer.optimizer_steps}
                                  for name, slot in learning.items()},
                     "selector": self.selector.state_dict(), "rng": rng_state(self._engines())}
            from astuner.backbone.debug.lora import OneAdapter

            models = {slot.folder: OneAdapter(slot.model, slot.adapter) if slot.adapter else slot.model
                      for slot in learning.values()}
        save_checkpoint(self.run_dir.checkpoints, step, models, self.tokenizer, state,
                        self.cfg.trainer_common.max_checkpoints_to_keep)

    def _trajectories(self, step: int, batch: RolloutBatch) -> None:
        limit = self.cfg.trainer_common.trajectories_per_step
        rows = [episode_row(e) for e in batch.episodes[:limit]]
        write_trajectories(self.run_dir.trajectories, step, rows)
        # token by token, for the trajectory viewer: what each sample's tokens read as, which were trained, the
        # engine's and the trainer's log-probs, the advantage (gzip: the prompts repeat from sample to sample)
        write_token_records(self.run_dir.trajectories, step, [
            token_record(e.episode_uuid, k, s, self._pieces) for e in batch.episodes[:limit]
            for k, s in enumerate(e.samples)])

    def _line(self, step: int, m: dict[str, float]) -> str:
        parts = [f"step {step}/{self.total_steps}", f"reward {m['reward/mean']:.3f}",
                 f"success {m['reward/success_rate']:.2f}"]
        if "actor/pg_loss" in m:
            parts += [f"pg_loss {m['actor/pg_loss']:+.4f}", f"grad_norm {m.get('actor/grad_norm', 0):.3f}"]
        if "actor/kl" in m:
            parts.append(f"kl {m['actor/kl']:.4f}")
        parts += [f"errors {m['rollout/error_rate']:.2f}"]
        if m.get("rollout/madness_rate"):  # episodes given the madness reward (rollout.agent_madness_reward)
            parts.append(f"madness {m['rollout/madness_rate']:.2f}")
        parts.append(f"{m['perf/time_step_s']:.1f}s")
        if "val/reward_mean" in m:
            parts.append(f"val {m['val/reward_mean']:.3f}")
        for name in self.cfg.policies:
            if f"policy/{name}/reward/mean" in m:
                parts.append(f"{name} {m[f'policy/{name}/reward/mean']:.3f}")
        return " | ".join(parts)

    def _finish(self) -> None:
        writer: Optional[MetricsWriter] = getattr(self, "writer", None)
        try:
            if writer is not None:
                writer.close()  # the trackers first: nothing that fails below can cost them their last step
        finally:
            slots = getattr(self, "slots", None)
            engines = [slot.engine for slot in slots.values()] if slots else [getattr(self, "engine", None)]
            for engine in engines:
                shutdown = getattr(engine, "shutdown", None)
                if shutdown is not None:
                    shutdown()
            pending = asyncio.all_tasks(self.loop)  # engines' background tasks: cancel them as asyncio.run would
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()
        if writer is None:
            return
        try:
            path = plot_reward_curve(writer.history(), self.run_dir.root / "reward_curve.png",
                                     self.ctx.config.experiment_name)
        except OSError as exc:  # a full disk at the end: the curve is a picture of metrics.jsonl, the run stands
            logger.warning(f"reward_curve.png not written: {exc.strerror or exc}")
            path = None
        if path:
            logger.info(f"reward curve: {path}")
