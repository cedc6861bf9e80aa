"""`astuner eval --conf X.yaml --model A [--model B ...]`: the config's workflow and judge over a split, k episodes
per task, for each model; a table on the terminal, `DIR/eval.json` and the episodes (`astuner view DIR`).
Exit codes as the training command's: 0 ok, 2 a user error (one line), 1 an internal failure, 130 interrupted."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from astuner.cli_args import OneLineParser, run_command

DEFAULT_OUT = "eval_record"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="astuner eval",
                           description="Evaluate and compare models on a config's tasks, with 95% intervals.")
    parser.add_argument("--conf", required=True, metavar="PATH", help="the experiment YAML (workflow, judge, tasks)")
    parser.add_argument("--model", action="append", required=True, metavar="MODEL",
                        help="a model folder, a checkpoint (global_step_N, LoRA included) or "
                             "base_url=URL,model=NAME[,api_key_env=VAR]; label=NAME,path=PATH (or label=NAME, with an "
                             "endpoint) names it; repeat to compare (differences: each later model minus an earlier)")
    parser.add_argument("--split", choices=["val", "train"], default="val", help="the tasks (default: val)")
    parser.add_argument("--limit", type=int, metavar="N", help="the first N tasks of the split")
    parser.add_argument("--k", type=int, metavar="K",
                        help="episodes per task (default: astuner.rollout.val_kwargs.num_repeat); pass@1..K reported")
    parser.add_argument("--out", metavar="DIR",
                        help=f"a new folder for eval.json and the episodes "
                             f"(default: {DEFAULT_OUT}/<experiment>-<time>)")
    parser.add_argument("--verbose", action="store_true", help="the libraries' own warnings and progress bars")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra-style config overrides")
    return parser


def main(argv: Sequence[str]) -> int:
    return run_command(build_parser(), _evaluate, argv, intermixed=True)


def _episode_failure(record: dict) -> bool:
    """A log record of one failed episode (its traceback, a retry) or of a gateway call it failed on."""
    return (record["level"].no >= 30 and "failed" in record["message"]
            and record["name"] in ("astuner.rollout.manager", "astuner.gateway.server"))


def _evaluate(args: argparse.Namespace) -> int:
    from astuner.errors import DataError

    for option, value in (("--limit", args.limit), ("--k", args.k)):
        if value is not None and value < 1:
            raise DataError(f"{option} must be at least 1, got {value}")
    from astuner.records.progress import quiet_libraries

    quiet_libraries(args.verbose)
    from astuner.model.openmp import prefer_passive_waits

    prefer_passive_waits()
    from astuner.config import load_run_config
    from astuner.errors import Found
    from astuner.evaluate import candidates as cands
    from astuner.plugins import resolve_plugins

    found = Found()
    models = [found.attempt(cands.parse, spec)[1] for spec in args.model]
    composed, config = found.attempt(load_run_config, args.conf, args.overrides, found)
    plugins = resolve_plugins(config, found) if composed else None
    found.raise_all()
    cands.unique_labels(models)
    from astuner.evaluate.runner import check_config

    check_config(config)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.out is not None and not args.out.strip():
        raise DataError("--out is empty: name a new folder (or leave --out out for "
                        f"{DEFAULT_OUT}/<experiment>-<time>)")
    out = Path(args.out) if args.out else Path(DEFAULT_OUT) / f"{config.experiment_name}-{stamp}"
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} is a file: name a new folder")
    if out.exists() and any(out.iterdir()):
        raise DataError(f"--out {out} exists and is not empty: name a new folder (nothing there is overwritten)")
    from astuner.evaluate.runner import check_endpoints

    check_endpoints(models)  # a wrong URL, key or model name: said now, before any model is loaded
    made_parent = not out.parent.exists()  # (the default eval_record/ on a first evaluation)
    out.mkdir(parents=True, exist_ok=True)
    from astuner.records.run_dir import setup_logging

    # each failed episode's traceback goes to eval.log; the console gets a line per model (runner.py)
    setup_logging(out / "eval.log", console_filter=lambda record: not _episode_failure(record))
    from astuner.evaluate.evaluation import run_evaluation

    try:
        result = run_evaluation(config, plugins, models, args.split, args.limit, args.k, out)
    except BaseException:
        if not (out / "trajectories").is_dir():  # nothing was evaluated: the folder does not block a rerun
            import shutil

            from loguru import logger

            logger.remove()
            shutil.rmtree(out, ignore_errors=True)
            if made_parent and out.parent.is_dir() and not any(out.parent.iterdir()):
                out.parent.rmdir()  # the folder this evaluation made for it: nothing of it is left either
        raise
    from astuner.evaluate.report import table

    print(table(result))
    for note in result.get("notes", []):
        print(f"astuner: note: {note}", file=sys.stderr)
    print(f"astuner: eval.json and the episodes in {out} (astuner view {out})", file=sys.stderr)
    return 0
