"""verl's v0 trainer never finishes its trackers: `RayPPOTrainer.fit` makes a `Tracking` and returns without
calling its `finish()`, which only its `__del__` does. wandb (and swanlab) keep a step's row in memory until a
later step or `finish()`, so when the `Tracking` outlives `fit` (a reference cycle, a traceback holding the
frame) and the run's Ray head is stopped, the last step never reaches the tracker's files. Loaded in every
process verl starts (verl's `VERL_USE_EXTERNAL_MODULES` hook), this finishes every `Tracking` that `fit` made
as `fit` returns or raises, as verl's v1 runner does; `finish()` runs once, so the later `__del__` does nothing.
Nothing in verl's installed files is changed."""

from __future__ import annotations

import sys
from typing import Any

from astuner.backbone.cpu_hooks import after_import

TRAINER_MODULE = "verl.trainer.ppo.ray_trainer"


def finish_after_fit(module: Any) -> None:
    """Wrap `module.RayPPOTrainer.fit` (once): the trackers it opens are finished when it ends, with exit code 0
    when it returned and 1 when it raised."""
    trainer = module.RayPPOTrainer
    original = trainer.fit
    if getattr(original, "astuner_finishes_trackers", False):
        return

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        from verl.utils import tracking

        opened: list[Any] = []
        init = tracking.Tracking.__init__

        def tracked_init(obj: Any, *a: Any, **k: Any) -> None:
            init(obj, *a, **k)
            opened.append(obj)

        tracking.Tracking.__init__ = tracked_init
        ok = False
        try:
            result = original(self, *args, **kwargs)
            ok = True
            return result
        finally:
            tracking.Tracking.__init__ = init
            for tracker in opened:
                try:
                    tracker.finish(exit_code=0 if ok else 1)
                except Exception as exc:  # noqa: BLE001 - fit's own error (if any) is the one to raise
                    print(f"astuner: a verl tracker did not finish cleanly: {type(exc).__name__}: {exc}",
                          file=sys.stderr)

    fit.astuner_finishes_trackers = True  # type: ignore[attr-defined]
    trainer.fit = fit


after_import(TRAINER_MODULE, finish_after_fit)
