"""The run folder: `{exp_dir}/{experiment_name}/` with config.yaml, astuner.log, tensorboard/,
checkpoints/, trajectories/. An existing run is never overwritten silently: it is resumed (--resume)
or the start is refused with a message saying how to proceed."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from loguru import logger

from astuner.errors import RunDirError

RUN_MARKERS = ("config.yaml", "astuner.log", "checkpoints", "metrics.jsonl")
NEVER_STEPPED = "FAILED_BEFORE_FIRST_STEP"
"""Written into a new run's folder when the run ended before its first step: a rerun starts afresh there."""


@dataclass
class RunDir:
    """`layout` "launcher" (the CLI's): checkpoints/ and tensorboard/ in the run folder; "tune" (the
    function API's, as its users expect): global_step_N/ directly in it and monitor/tensorboard/."""

    root: Path
    resumed: bool
    layout: str = "launcher"

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def log_path(self) -> Path:
        return self.root / "astuner.log"

    @property
    def tensorboard(self) -> Path:
        return self.root / "monitor" / "tensorboard" if self.layout == "tune" else self.root / "tensorboard"

    @property
    def checkpoints(self) -> Path:
        return self.root if self.layout == "tune" else self.root / "checkpoints"

    @property
    def trajectories(self) -> Path:
        return self.root / "trajectories"


def holds_run(folder: Path) -> bool:
    """A run that took at least one step (or is running) lives here."""
    return (folder.is_dir() and not (folder / NEVER_STEPPED).exists()
            and any((folder / m).exists() for m in RUN_MARKERS))


def _stepped(run: "RunDir") -> bool:
    """Whether the run recorded anything of a step: metric rows (debug), episodes (every backbone writes
    trajectories/ as it rolls out) or a checkpoint at any depth (verl's and Trinity's layouts). Erring towards
    True only keeps a folder as a run; never the other way, so no record of a step is ever cleared."""
    metrics = run.root / "metrics.jsonl"
    if metrics.is_file() and metrics.stat().st_size > 0:
        return True
    if run.trajectories.is_dir() and any(run.trajectories.iterdir()):
        return True
    return run.checkpoints.is_dir() and any(True for _ in run.checkpoints.rglob("global_step_*"))


def mark_if_never_stepped(run: "RunDir") -> None:
    """A new run that ended before its first step leaves no run behind: its folder is marked, and the next
    start there proceeds (keeping this attempt's log as astuner.failed_start.<time>.log)."""
    try:
        if not run.resumed and not _stepped(run):
            (run.root / NEVER_STEPPED).write_text("this run ended before its first step; a rerun starts afresh\n")
    except OSError:
        pass


def _clear_failed_start(root: Path) -> None:
    import shutil

    stamp = time.strftime("%Y%m%d-%H%M%S")
    for item in root.iterdir():
        if item.name == "astuner.log":
            item.rename(root / f"astuner.failed_start.{stamp}.log")
        elif item.name.startswith("astuner.failed_start."):
            continue
        elif item.is_dir() and not item.is_symlink():
            shutil.rmtree(item)
        else:
            item.unlink()


# how a user continues a run, or names a new one, in the CLI's words and in tune()'s (`layout`)
AGAIN = {"launcher": ("--resume", "astuner.experiment_name=<new name>", "pick another --exp-dir"),
         "tune": ("tune(resume=True)", "tune(experiment_name=<new name>)", "call tune() from another folder")}


def check_run_dir(exp_dir: Path, experiment_name: str, resume: bool, layout: str = "launcher") -> Path:
    """The run folder to use; `RunDirError` if it holds a run and `resume` is False. Writes nothing."""
    resume_with, rename_with, elsewhere = AGAIN.get(layout, AGAIN["launcher"])
    root = Path(exp_dir) / experiment_name
    if root.exists() and not root.is_dir():
        raise RunDirError(f"{root} exists and is not a folder; remove it or {elsewhere}")
    if holds_run(root) and not resume:
        raise RunDirError(f"{root} already holds a run; continue it with {resume_with}, start a new one with "
                          f"{rename_with}, or move the folder away")
    return root


def dump_config(merged: dict[str, Any]) -> str:
    """The config as YAML, the astuner: section first (what a reader looks for; other sections follow as merged)."""
    ordered = {**({"astuner": merged["astuner"]} if "astuner" in merged else {}), **merged}
    return yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True)


def prepare_run_dir(exp_dir: Path, experiment_name: str, merged: dict[str, Any], resume: bool,
                    layout: str = "launcher") -> RunDir:
    """Create (or reopen, with `resume`) the run folder, write config.yaml and start logging to astuner.log.
    On resume a changed config is kept: the earlier one is saved as config.before_resume_<time>.yaml."""
    root = check_run_dir(exp_dir, experiment_name, resume, layout)
    if (root / NEVER_STEPPED).exists():
        _clear_failed_start(root)
    resumed = holds_run(root)
    root.mkdir(parents=True, exist_ok=True)
    run = RunDir(root=root, resumed=resumed, layout=layout)
    for folder in (run.tensorboard, run.checkpoints, run.trajectories):
        folder.mkdir(parents=True, exist_ok=True)
    text = dump_config(merged)
    if run.config_path.exists() and _config_changed(run.config_path, text):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run.config_path.rename(root / f"config.before_resume_{stamp}.yaml")
    run.config_path.write_text(text, encoding="utf-8")
    setup_logging(run.log_path)
    logger.info(f"{'resuming' if resumed else 'starting'} run in {root}")
    return run


def _config_changed(path: Path, text: str) -> bool:
    """Whether the run folder's config.yaml holds another config than `text` (by value: the order of its sections
    is no change)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) != yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return True  # unreadable: kept aside as it is


def setup_logging(log_path: Path, console_filter: Any = None) -> None:
    """Log to the console and append to `log_path`; `console_filter(record)` False keeps a record off the console
    (it is still in the file)."""
    from astuner.records.progress import console_sink

    logger.remove()
    # through tqdm.write: above a progress bar, never on its row; coloured only on a terminal
    logger.add(console_sink, level="INFO", colorize=bool(getattr(sys.stderr, "isatty", lambda: False)()),
               format="<green>{time:HH:mm:ss}</green> | <level>{level: <7}</level> | {message}", filter=console_filter)
    logger.add(LogFile(log_path), level="DEBUG", enqueue=False,
               format="{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {name}:{line} | {message}")


class LogFile:
    """A log file appended to, each record flushed; once it cannot be written (a full disk), one line on stderr
    says so and the console goes on alone (not a library's traceback per record)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh: Any = open(self.path, "a", encoding="utf-8")

    def write(self, message: str) -> None:
        if self.fh is None:
            return
        try:
            self.fh.write(message)
            self.fh.flush()
        except OSError as exc:
            fh, self.fh = self.fh, None
            try:
                fh.close()
            except OSError:  # what it still held cannot be written either
                pass
            print(f"astuner: the log {self.path} cannot be written ({exc.strerror or exc}); the console only from "
                  f"here", file=sys.stderr, flush=True)

    def stop(self) -> None:  # loguru's, when the sink is removed
        if self.fh is not None:
            self.fh.close()
            self.fh = None
