"""`--backbone debug`: the whole loop in one process, no Ray; trains on CPU or one GPU."""

from __future__ import annotations

from typing import Any, Optional


class DebugBackbone:
    name = "debug"
    refuses: dict[str, str] = {}  # every feature (astuner.backbone.capabilities)
    uses_ray = False
    records_tokens = True

    def check_available(self) -> None:
        """Its dependencies are astuner's own."""

    def notes(self, config: Any) -> list[str]:
        return []

    def plan(self, config: Any) -> Optional[str]:
        """None: the trainer sizes itself from the model and the device it loads on. Off-policy, what its producer
        (a copy of the one policy, on an hf engine) cannot take is refused here."""
        from astuner.config.sync_schedule import SyncSchedule

        a = config.astuner
        schedule = SyncSchedule.of(a.trainer_common.off_policy)
        if schedule.synchronous:
            return None
        from astuner.errors import ConfigError

        key = "astuner.trainer_common.off_policy"
        if a.policies:
            raise ConfigError(f"{key}: rollouts ahead of training take one policy on the debug backbone (its rollouts "
                              f"sample a copy of that policy's weights); with astuner.policies keep max_staleness 0")
        engine = a.rollout.engine
        if engine == "auto":  # vllm where it is installed and a GPU is visible
            from astuner.model.engines.factory import pick_engine

            engine = pick_engine(a)
        if engine != "hf":
            picked = "" if a.rollout.engine == engine else f" (auto picks {engine} on this machine)"
            raise ConfigError(f"{key}: rollouts ahead of training run on hf engines of their own, each over a copy "
                              f"of the policy; astuner.rollout.engine {engine}{picked} cannot; use engine hf or "
                              f"max_staleness 0")
        return schedule.describe()

    def check_resume(self, config: Any, checkpoints: Any) -> None:
        from astuner.backbone.debug.resume import check_resume

        check_resume(config.astuner, checkpoints)

    def dry_run(self, config: Any, root: Any) -> str:
        from astuner.records.run_dir import dump_config

        return dump_config(config.merged)

    def run(self, ctx: Any) -> None:
        from astuner.backbone.debug.loop import DebugTrainer

        if ctx.with_ray:
            from loguru import logger

            logger.warning("--with-ray has no effect with --backbone debug (it runs without Ray)")
        DebugTrainer(ctx).fit()


BACKBONE = DebugBackbone()
