"""A backbone for CLI tests: records what it was given, or misbehaves on request."""

import time

from loguru import logger

from astuner.backbone.debug.backbone import DebugBackbone

CALLS = []


class FakeBackbone(DebugBackbone):
    def run(self, ctx):
        CALLS.append(ctx)
        mode = ctx.config.merged.get("fake_backbone_mode", "ok")
        if mode == "interrupt":
            raise KeyboardInterrupt
        if mode == "crash":
            raise RuntimeError("internal bug")
        if mode == "step_then_crash":
            (ctx.run_dir.root / "metrics.jsonl").write_text('{"step": 1}\n')
            raise RuntimeError("internal bug after a step")
        if mode == "slow_cleanup":  # a run whose shutdown takes long (the first Ctrl-C lands in the sleep)
            try:
                (ctx.run_dir.root / "ran.txt").write_text(ctx.config.experiment_name)
                time.sleep(120)
            finally:
                (ctx.run_dir.root / "cleaning_up.txt").write_text("the first Ctrl-C arrived")
                time.sleep(120)
        logger.info("fake backbone ran")
        (ctx.run_dir.root / "ran.txt").write_text(ctx.config.experiment_name)


BACKBONE = FakeBackbone()
