"""An evaluation from start to end: the split's tasks, each candidate evaluated in turn (its engine freed before the
next loads), its episodes written as they finish, then eval.json with every model's figures and each pair's
difference."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from astuner.errors import DataError
from astuner.evaluate.candidates import Candidate
from astuner.evaluate.report import figures, report, write_episodes, write_report
from astuner.evaluate.runner import evaluate_candidate, split_tasks

FEW_TASKS = 10  # below it the report says its intervals are rough


def run_evaluation(config: Any, plugins: Any, candidates: list[Candidate], split: str, limit: Optional[int],
                   k: Optional[int], out: Path) -> dict[str, Any]:
    from astuner.model.auxiliary import config_auxiliary_models

    cfg = config.astuner
    k = k or cfg.rollout.val_kwargs.num_repeat
    tasks = split_tasks(cfg, config.extra_roots, split, limit)
    auxiliary = config_auxiliary_models(cfg, config.extra_roots)
    out.mkdir(parents=True, exist_ok=True)  # (the command made it; select_model-like callers may not have)
    seed = cfg.rollout.seed
    models = []
    for step, candidate in enumerate(candidates, start=1):
        evaluated = evaluate_candidate(config, plugins, candidate, tasks, k, split, out, auxiliary)
        write_episodes(out, step, evaluated)
        if all(e.failed for e in evaluated.episodes):  # a setup problem (a key, an unreachable endpoint), not a score
            if models:  # the models before it stand: their figures are kept
                write_report(out, report(models, seed, {**meta(config, split, tasks, k), "incomplete":
                                                        f"every episode of {candidate.label} failed"}))
            first = (evaluated.episodes[0].error or "").strip().splitlines()
            raise DataError(f"--model {candidate.label}: every one of its {len(evaluated.episodes)} episodes failed "
                            f"(their episodes in {out / 'trajectories'}, tracebacks in {out / 'eval.log'}); the first: "
                            f"{first[-1][:200] if first else 'unknown'}"
                            + (f"; eval.json holds the {len(models)} model(s) before it" if models else ""))
        models.append(figures(evaluated, k, seed))
    result = report(models, seed, meta(config, split, tasks, k))
    if len(tasks) < FEW_TASKS:
        result["notes"] = [f"{len(tasks)} tasks: intervals over so few tasks are rough (the bootstrap has little to "
                           f"resample); evaluate on {FEW_TASKS} or more for a difference to tell"]
    write_report(out, result)
    return result


def meta(config: Any, split: str, tasks: list[Any], k: int) -> dict[str, Any]:
    ro = config.astuner.rollout
    return {"experiment": config.experiment_name, "split": split, "tasks": len(tasks), "k": k, "seed": ro.seed,
            "sampling": {"temperature": ro.val_kwargs.temperature, "top_p": ro.val_kwargs.top_p}}
