"""The debug backbone's training loop: one process, no Ray, CPU (fp32) or one GPU (bf16). It only schedules:
per step, an experience source (`experience.py`: rollouts of the step's tasks) hands samples to the learner
(`learner.py`: advantages, the update, the weights to the engines, checkpoints), then the step's records
(`step_records.py`): validation every `test_freq` steps, the metric row, the trajectories, a checkpoint every
`save_freq` steps.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from typing import Any, Optional

from loguru import logger

from astuner.errors import ConfigError, DataError
from astuner.model.model_path import resolve_model_path
from astuner.model.precision import compute_dtype
from astuner.records.metrics import MetricsWriter, plot_reward_curve
from astuner.records.tokens import TokenPieces
from astuner.rollout.manager import RolloutManager, build_judge
from astuner.rollout.row_problems import RowProblems
from astuner.config.sync_schedule import SyncSchedule
from astuner.backbone.debug.experience import PromptLedger, RolloutSource
from astuner.backbone.debug.learner import Learner
from astuner.backbone.debug.resume import check_resume
from astuner.backbone.debug.step_records import step_line, step_metrics, write_step_trajectories
from astuner.backbone.debug.checkpoint import latest_checkpoint, load_trainer_state, restore_rng, rng_state


class DebugTrainer:
    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.cfg = ctx.config.astuner
        self.run_dir = ctx.run_dir
        self.stop_requested = False
        self.row_problems = RowProblems()  # tasks whose rows lack what the workflow or judge read
        self.trained_steps = 0  # steps of this session whose update had samples
        # one event loop for the whole run: in-process engines (vLLM) keep background tasks on it; off-policy, it
        # runs in a thread of its own (the rollouts'), beside the learner's
        self.loop = asyncio.new_event_loop()
        self.loop_thread: Optional[Any] = None
        self.pipeline: Optional[Any] = None  # the off-policy source (pipeline.py); None: synchronous

    def _await(self, coroutine: Any) -> Any:
        if self.loop_thread is not None:
            return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()
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
        self.learner = Learner(cfg, self.model_path, self.tokenizer, self.pad_id, device, self.dtype, self.checkpoint,
                               self.run_dir.checkpoints, self.ctx.config.extra_roots, self._await)
        self.engine = self.learner.engine
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
                                      engines=self.learner.engines(), row_problems=self.row_problems)
        self.source = RolloutSource(cfg, self.manager, self.selector, self._await, self.ctx.config.experiment_name,
                                    lambda: self.learner.version)
        steps_per_epoch = self.selector.steps_per_epoch(cfg.data.train_batch_size)
        self.total_steps = tc.total_training_steps or tc.total_epochs * steps_per_epoch
        self.schedule = SyncSchedule.of(tc.off_policy)
        if not self.schedule.synchronous:
            self._setup_pipeline(auxiliary)
        from astuner.records.monitors import open_monitors

        self.writer = MetricsWriter(self.run_dir.root, self.run_dir.tensorboard, "tensorboard" in tc.logger,
                                    # beside tensorboard/: the run folder, or monitor/ in tune()'s layout
                                    open_monitors(tc.logger, cfg.project_name, self.ctx.config.experiment_name,
                                                  self.run_dir.tensorboard.parent, self.ctx.config.merged))
        self.start_step = 0
        self.ledger = PromptLedger()  # each trained step's draw from the selector (resume/prompts_lost, _replayed)
        if self.checkpoint is not None:
            state = load_trainer_state(self.checkpoint)
            self.learner.restore(state)
            self.selector.load_state_dict(state["selector"])
            restore_rng(state["rng"], self.learner.engines())
            self.start_step = state["step"]
            if self.pipeline is not None:
                self.pipeline.resume_at(self.start_step, state.get("pipeline"))
            # a checkpoint from before the ledger: its steps' draws end where the selector resumes
            self.ledger = PromptLedger(state.get("prompts") or {"through": self.selector.position()})
            self.writer.truncate_after(self.start_step)
            logger.info(f"resumed from {self.checkpoint} (step {self.start_step} of {self.total_steps})")
        elif self.run_dir.resumed:  # the earlier run died before its first checkpoint: it starts over
            self.writer.truncate_after(-1)
            logger.warning(f"--resume: {self.run_dir.checkpoints} holds no complete checkpoint; starting from step 0 "
                           f"(the earlier run's metric rows are cleared)")
        traces = cfg.trainer_common.traces
        plan = (f"training from the trace store only ({traces.mode}; traces.then_rl false: no RL step)"
                if traces.store is not None and not traces.then_rl else
                f"{self.total_steps} steps of {cfg.data.train_batch_size} tasks x {cfg.rollout.num_repeat} episodes; "
                f"{self.schedule.describe()}")
        logger.info(f"debug backbone: {self.learner.models_line()} on {device} ({self.dtype} compute, fp32 weights), "
                    f"engine {type(getattr(self.engine, 'engine', self.engine)).__name__}, {len(self.train_tasks)} "
                    f"training / {len(self.val_tasks)} validation tasks, {plan}")

    def _setup_pipeline(self, auxiliary: dict[str, Any]) -> None:
        """Off-policy: an engine per step that may be in flight (max_staleness + 1, each over a copy of the policy)
        with its rollouts, and the event loop in a thread of its own."""
        from astuner.backbone.debug.pipeline import PipelinedSource, producer_engine, run_forever

        cfg = self.cfg
        pool = []
        # one engine per step that may be in flight: no more than the run has steps
        for _ in range(min(self.schedule.bound, max(self.total_steps - 1, 0)) + 1):
            engine = producer_engine(cfg, self.tokenizer, self.learner.model, self.model_path)
            pool.append((engine, RolloutManager(cfg, self.ctx.plugins.workflow, self.judge, engine, self.tokenizer,
                                                auxiliary_models=auxiliary, engines={"default": engine},
                                                row_problems=self.row_problems)))
        self.pipeline = PipelinedSource(self.source, pool, self.schedule, self.loop, 1, self.total_steps,
                                        cfg.rollout.seed)
        self.loop_thread = run_forever(self.loop)

    # -- the loop ----------------------------------------------------------------------------------
    def fit(self) -> None:
        from astuner.records.progress import Progress

        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, self._on_sigint)
        try:
            self._setup()
            traces_only = self.cfg.trainer_common.traces.store is not None and \
                not self.cfg.trainer_common.traces.then_rl
            if traces_only:  # the run is its training from the store: step 0, then done
                if self.checkpoint is None:
                    self._step_zero()
                else:
                    logger.info(f"nothing to do: the run trained from its store (checkpoint {self.checkpoint.name})")
                return
            if self.start_step >= self.total_steps:
                logger.info(f"nothing to do: the run finished its {self.total_steps} steps (checkpoint global_step_"
                            f"{self.start_step}); raise "
                            f"{self.ctx.key_name('astuner.trainer_common.total_training_steps')} to train further")
                return
            if self.checkpoint is None:  # a new run (a resumed one starts after its checkpoint, global_step_0 too)
                self._step_zero()
            if self.pipeline is not None:  # the weights the run starts from: version start_step
                from astuner.backbone.debug.pipeline import weight_snapshot

                self.pipeline.publish(self.start_step, weight_snapshot(self.learner.model))
                self.pipeline.start()
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
        started = time.perf_counter()
        for step in range(self.start_step + 1, self.total_steps + 1):
            metrics = self.train_step(step)
            if tc.test_freq > 0 and step % tc.test_freq == 0 and self.val_tasks:
                metrics.update(self.source.validate(self.val_tasks, step))
            # the RL steps' wall time so far in this session, validations included (time to a reward)
            metrics["perf/elapsed_s"] = time.perf_counter() - started
            self.writer.write(step, metrics)
            bar.update(1, reward=f"{metrics['reward/mean']:.3f}", success=f"{metrics['reward/success_rate']:.2f}",
                       madness=f"{metrics.get('rollout/madness_rate', 0.0):.2f}")
            eta = bar.eta()
            logger.info(step_line(step, self.total_steps, metrics, self.cfg.policies) + (f" | eta {duration(eta)}" if eta and eta >= 1 and step < self.total_steps
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
        """Before the first step of a new run: the warm start (if any), training from a trace store (if any), the
        validation after them (or before training), their metric row 0, then with either the checkpoint
        global_step_0 — saved last, so it holds everything step 0 did (weights, the KL reference, the engine's sampler
        after that validation): a run killed at any point after it and resumed is the run that was not killed."""
        tc = self.cfg.trainer_common
        warm = self._warm_start() if tc.sft.steps > 0 else {}
        if tc.traces.store:
            warm.update(self._train_from_traces())
        if (tc.val_before_train or warm) and self.val_tasks:
            label = "after training from the store" if tc.traces.store else "after the warm start"
            warm.update(self.source.validate(self.val_tasks, 0, label if warm else "before training"))
        if warm:
            self.writer.write(0, warm)
        if tc.sft.steps > 0 or tc.traces.store:
            self.save(0)

    def _train_from_traces(self) -> dict[str, float]:
        """trainer_common.traces: the chosen episodes of the store, SFT or off-policy policy gradient on them
        (backbone/debug/traces.py), the weights to the engine and the KL reference."""
        from astuner.config.paths import find_user_path
        from astuner.backbone.debug import sft, traces

        tc, t = self.cfg.trainer_common, self.cfg.trainer_common.traces
        path = find_user_path(t.store, self.ctx.config.extra_roots)
        if path is None:
            raise DataError(f"astuner.trainer_common.traces.store: {t.store} not found")
        out: dict[str, float] = {}
        if self.val_tasks:
            out["traces/val_reward_before"] = self.source.validate(
                self.val_tasks, 0, "before training from the store")["val/reward_mean"]
        chosen = traces.choose(path, self.cfg, self.tokenizer)
        left = ", ".join(f"{reason} {n}" for reason, n in sorted(chosen.left_out.items())) or "none"
        logger.info(f"training from {path}: {len(chosen.episodes)} episodes chosen (mean reward "
                    f"{chosen.metrics()['traces/reward_mean']:.3f}; left out: {left}), {t.steps} {t.mode} steps")
        t0 = time.perf_counter()
        if t.mode == "sft":
            samples = [s for episode in chosen.episodes.values() for s in episode]
            losses = sft.train(self.learner.model, samples, t.steps, t.lr, t.batch_size, tc.seed, self.pad_id,
                               tc.max_token_len_per_micro_batch, self.dtype, tc.optim.grad_clip,
                               "training from the store")
            out.update({"traces/loss_first": losses[0], "traces/loss_last": losses[-1]})
        else:
            source = traces.TraceSource(chosen, t.batch_size, tc.seed)
            losses = []
            for _ in range(t.steps):
                metrics, _, _ = self.learner.learn(source.collect(), chosen.temperature, tc.off_policy.is_cap)
                if "actor/pg_loss" in metrics:
                    losses.append(metrics["actor/pg_loss"])
            out["traces/updates"] = float(len(losses))
            if losses:
                out.update({"traces/pg_loss_first": losses[0], "traces/pg_loss_last": losses[-1]})
        self.learner.took_warm_start()
        out.update({**chosen.metrics(), "perf/time_traces_s": time.perf_counter() - t0})
        logger.info(f"trained from the store in {out['perf/time_traces_s']:.0f} s")
        return out

    def _warm_start(self) -> dict[str, float]:
        """trainer_common.sft: the expert's demonstrations through the workflow, SFT on them, the weights to
        the engine and the KL reference (this model; `_step_zero` saves it all as global_step_0)."""
        from astuner.errors import RunFailed
        from astuner.backbone.debug import sft

        cfg, s = self.cfg, self.cfg.trainer_common.sft
        out: dict[str, float] = {}
        if self.val_tasks:
            out["sft/val_reward_before"] = self.source.validate(self.val_tasks, 0, "before the warm start")["val/reward_mean"]
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
        losses = sft.train(self.learner.model, demos.samples, s.steps, s.lr, s.batch_size, self.cfg.trainer_common.seed,
                           self.pad_id, self.cfg.trainer_common.max_token_len_per_micro_batch, self.dtype,
                           self.cfg.trainer_common.optim.grad_clip)
        t2 = time.perf_counter()
        self.learner.took_warm_start()
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
        """One step: the source's experience, the learner's update on it, the weights to the engines."""
        t0 = time.perf_counter()
        experience = (self.pipeline or self.source).collect(step)
        t1 = time.perf_counter()
        off = self.cfg.trainer_common.off_policy
        is_cap = None if self.pipeline is None else off.is_cap
        metrics, trained, dropped_groups = self.learner.learn(experience.samples, self.cfg.rollout.temperature, is_cap,
                                                              off.anchor)
        self.trained_steps += bool(trained)
        t2 = time.perf_counter()
        self.learner.push_weights()
        if self.pipeline is not None:
            from astuner.backbone.debug.pipeline import weight_snapshot

            self.pipeline.publish(self.learner.version, weight_snapshot(self.learner.model))
        t3 = time.perf_counter()
        metrics = {**experience.metrics, **metrics, **self.ledger.trained(experience.drawn),
                   **step_metrics(experience.epoch, len(experience.tasks), trained, dropped_groups,
                                  experience.rollout_s, t2 - t1, t3 - t2, t3 - t0)}
        write_step_trajectories(self.run_dir.trajectories, step, experience.batch,
                                self.cfg.trainer_common.trajectories_per_step, self._pieces)
        return metrics

    def save(self, step: int) -> None:
        state = {"selector": self.selector.state_dict(), "prompts": self.ledger.state_dict(),
                 "rng": rng_state(self.learner.engines() if self.cfg.policies else self.engine)}
        if self.pipeline is not None and self.pipeline.snapshots:  # started: what the steps after this one need
            state["pipeline"] = self.pipeline.state(step)
        self.learner.save(step, state)

    def _finish(self) -> None:
        writer: Optional[MetricsWriter] = getattr(self, "writer", None)
        if self.pipeline is not None:
            self.pipeline.stop()
        if self.loop_thread is not None:  # the rollouts' thread ends; the loop is closed below, on this one
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.loop_thread.join()
            self.loop_thread = None
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
