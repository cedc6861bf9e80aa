"""A backbone for CLI tests: records what it was given, or misbehaves on request."""

from loguru import logger

CALLS = []


def run(ctx):
    CALLS.append(ctx)
    mode = ctx.config.merged.get("fake_backbone_mode", "ok")
    if mode == "interrupt":
        raise KeyboardInterrupt
    if mode == "crash":
        raise RuntimeError("internal bug")
    logger.info("fake backbone ran")
    (ctx.run_dir.root / "ran.txt").write_text(ctx.config.experiment_name)
