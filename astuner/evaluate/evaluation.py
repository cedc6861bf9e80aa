"""An evaluation from start to end: the split's tasks, each candidate evaluated in turn (its engine freed before the
next loads), its episodes written as they finish, then eval.json with every model's figures and each pair's
difference."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from astuner.errors import AstunerError, DataError
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
    models: list[dict[str, Any]] = []

    def stop(why: str, line: str) -> DataError:
        """A model that cannot be scored: the models before it stand (eval.json holds their figures)."""
        if models:
            write_report(out, report(models, seed, {**meta(config, split, tasks, k), "incomplete": why}))
            line += f"; eval.json holds the {len(models)} model(s) before it"
        return DataError(line)

    for step, candidate in enumerate(candidates, start=1):
        try:
            evaluated = evaluate_candidate(config, plugins, candidate, tasks, k, split, out, auxiliary)
        except BaseException as exc:  # a model that does not load (a damaged file), Ctrl-C: the earlier ones kept
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            kept = stop(f"{candidate.label} could not be evaluated: {first}" if isinstance(exc, Exception)
                        else f"{candidate.label} was interrupted", first)
            if isinstance(exc, AstunerError):  # the user's to fix: one line
                raise kept from None
            raise
        write_episodes(out, step, evaluated)
        # an endpoint that went away: its calls failed (an agent may catch the error and end its episode as if the
        # model had answered nothing), so no figure of the model's stands
        lost = evaluated.unreached or [e.error for e in evaluated.episodes if e.failed and _connection_lost(e.error)]
        if all(e.failed for e in evaluated.episodes) or lost:  # a setup problem (a key, an endpoint gone), no score
            first = (lost[0] if lost else evaluated.episodes[0].error or "").strip().splitlines()
            what = (f"{len(lost)} of its calls could not reach the model (not scored: its episodes' failures are "
                    f"not the model's)" if lost else f"every one of its {len(evaluated.episodes)} episodes failed")
            raise stop(f"{candidate.label}: {what}",
                       f"--model {candidate.label}: {what} (their episodes in {out / 'trajectories'}, tracebacks in "
                       f"{out / 'eval.log'}); the first: {first[-1][:200] if first else 'unknown'}")
        models.append(figures(evaluated, k, seed))
    result = report(models, seed, meta(config, split, tasks, k))
    if len(tasks) < FEW_TASKS:
        result["notes"] = [f"{len(tasks)} tasks: intervals over so few tasks are rough (the bootstrap has little to "
                           f"resample); evaluate on {FEW_TASKS} or more for a difference to tell"]
    write_report(out, result)
    return result


CONNECTION_ERRORS = ("APIConnectionError", "APITimeoutError", "ConnectError", "ConnectTimeout", "RemoteProtocolError",
                     "ConnectionRefusedError", "ConnectionResetError")


def _connection_lost(error: Optional[str]) -> bool:
    """Whether an episode failed on reaching the model (its traceback names a connection error of openai, httpx or
    the OS), not on what the model did."""
    return bool(error) and any(f"{name}:" in error or error.rstrip().endswith(name) for name in CONNECTION_ERRORS)


def meta(config: Any, split: str, tasks: list[Any], k: int) -> dict[str, Any]:
    ro = config.astuner.rollout
    return {"experiment": config.experiment_name, "split": split, "tasks": len(tasks), "k": k, "seed": ro.seed,
            "sampling": {"temperature": ro.val_kwargs.temperature, "top_p": ro.val_kwargs.top_p}}
