"""`--backbone debug`: the whole loop in one process, no Ray; trains on CPU or one GPU."""

from __future__ import annotations

from typing import Any


def run(ctx: Any) -> None:
    from astuner.trainer.loop import DebugTrainer

    if ctx.with_ray:
        from loguru import logger

        logger.warning("--with-ray has no effect with --backbone debug (it runs without Ray)")
    DebugTrainer(ctx).fit()
