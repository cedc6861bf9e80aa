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
        _check_copies_fit(a, schedule.bound)
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


def _check_copies_fit(a: Any, bound: int) -> None:
    """Off-policy on debug holds bound + 1 fp32 copies of the policy (one per step in flight) beside the learner's
    own (weights, gradients, AdamW's moments): refused here, with the numbers, when the machine's memory cannot."""
    from astuner.backbone.machine import available_memory
    from astuner.backbone.vllm_memory import model_folder, model_parameters
    from astuner.errors import ConfigError

    folder = model_folder(str(a.model.path)) if a.model.path else None
    params = model_parameters(folder) if folder is not None else None
    if not params:  # a model not there yet (the tiny model made on first use), or a hub id not in the cache
        return
    steps = a.trainer_common.total_training_steps
    engines = (min(bound, steps - 1) if steps else bound) + 1  # as loop.py builds them: no more than the steps
    copies, learner = engines * params * 4, params * 16
    room = available_memory()
    if copies + learner > room:
        gib = 2 ** 30
        fits = max(0, (room - learner) // (params * 4) - 1)
        raise ConfigError(f"astuner.trainer_common.off_policy.max_staleness {bound}: {engines} copies of the "
                          f"{params / 1e6:.1f}M-parameter policy ({copies / gib:.1f} GiB) and its training "
                          f"({learner / gib:.1f} GiB) do not fit the {room / gib:.1f} GiB of memory available; at "
                          f"most {fits} here" if fits else
                          f"astuner.trainer_common.off_policy.max_staleness {bound}: the policy's copies and its "
                          f"training ({(copies + learner) / gib:.1f} GiB) do not fit the {room / gib:.1f} GiB of "
                          f"memory available; keep max_staleness 0")
