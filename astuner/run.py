"""The one run sequence, for `astuner --conf` and `tune()` alike: load the backbone, check (the run folder,
the tasks, the model, the machine), prepare the run folder, run, and mark a new run that ended before its
first step so that a rerun under the same name starts afresh. Nothing is written before every check passed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from astuner.config import RunConfig
from astuner.config.notes import say
from astuner.errors import Found, PluginError
from astuner.plugins import Plugins
from astuner.records.run_dir import RunDir


@dataclass
class RunRequest:
    """One run: the composed config and its plug-ins, where and how to run it."""

    config: RunConfig
    plugins: Plugins
    backbone: str
    exp_dir: Path
    resume: bool = False
    with_ray: bool = False
    with_logview: bool = False
    logview_port: int = 0
    layout: str = "launcher"  # the run folder's layout: "launcher" (the CLI's) or "tune"
    merged: Optional[dict[str, Any]] = None  # what config.yaml holds (default: the config's merged tree)
    # name -> AgentScope model; or a callable returning that mapping, called once every check passed (it may load
    # models: a run that fails its checks does not wait for them)
    auxiliary_models: Any = field(default_factory=dict)
    # raised UserErrors of the checks pass through this (tune() names the Trinity-RFT keys they came from)
    explain: Callable[[Exception], Exception] = lambda exc: exc
    on_prepared: Optional[Callable[[RunDir], None]] = None  # called once the run folder exists
    key_name: Callable[[str], str] = lambda key: key  # an astuner key as the user set it (tune(): its argument)
    # what set exp_dir, and how to change it (tune(): a Trinity config's checkpoint_root_dir, or its working folder)
    exp_dir_key: tuple[str, str] = ("--exp-dir", "pick another --exp-dir")
    # what was found wrong before the request was made (the config's validation, its plug-ins): reported with
    # what the checks find, all together; the config's refused values are left at their defaults meanwhile
    found: Found = field(default_factory=Found)


def check(request: RunRequest, backbone: Any, offline: bool, report: bool = True) -> tuple[Path, list[str]]:
    """Every check made before anything is written, for the run and for `--dry-run` (`offline`: what needs the
    network is said, not checked): the run folder (taken by another run without --resume?), the preflight, and
    with --resume the backbone's resume checks. Each runs whatever the others (and what `request.found` holds
    already: the config's validation, its plug-ins) found; then every problem is raised together (`report`
    False: left in `request.found` for the caller to add to and raise). The run folder's path and the
    preflight's notes."""
    from astuner.config.lazy_imports import lazy_import_problem
    from astuner.config.seed_api import seed_api_problems
    from astuner.preflight import preflight
    from astuner.records.run_dir import check_run_dir, holds_run

    run, found = request.config, request.found
    root = Path(request.exp_dir) / run.experiment_name
    if found.sound("astuner.experiment_name"):  # else the folder is not the one the user named
        found.attempt(check_run_dir, request.exp_dir, run.experiment_name, request.resume, request.layout)
    for key, plugin in (("astuner.rollout.agentscope_workflow", request.plugins.workflow),
                        ("astuner.task_judge.judge_protocol", request.plugins.judge),
                        ("astuner.trainer_common.sft.expert", request.plugins.expert)):
        if plugin is None:
            continue
        # what would fail every episode (a package this environment lacks, a seed-system name astuner has no
        # equivalent for): said before anything is written
        for problem in [lazy_import_problem(plugin, request.key_name(key)),
                        *seed_api_problems(plugin, request.key_name(key))]:
            if problem:
                found.add(PluginError(problem))
    notes = preflight(run, request.exp_dir, offline=offline, backbone=backbone, exp_dir_key=request.exp_dir_key,
                      found=found)
    # before config.yaml is rewritten: a refused resume changes nothing
    if request.resume and not found and holds_run(root):
        found.attempt(backbone.check_resume, run, RunDir(root, resumed=True, layout=request.layout).checkpoints)
    if report:
        found.raise_all(request.explain)
    return root, notes


def execute(request: RunRequest) -> RunDir:
    """Run `request` to its end; the run folder. Raises what the checks or the backbone raised: every problem
    the checks found, a backbone whose package is missing among them."""
    from astuner.backbone import get_backbone, load_backbone

    installed, backbone = request.found.attempt(load_backbone, request.backbone)
    if not installed:  # its package is missing: said with what the checks find
        backbone = get_backbone(request.backbone)
    root, notes = check(request, backbone, offline=False)
    # --with-logview: its port taken now, so a busy one is refused before the run folder exists
    viewer = _bind_logview(root, request) if request.with_logview else None
    try:
        return _prepare_and_run(request, backbone, notes, viewer)
    finally:
        if viewer is not None:
            viewer.shutdown()
            viewer.server_close()


def _prepare_and_run(request: RunRequest, backbone: Any, notes: list[str], viewer: Any) -> RunDir:
    from loguru import logger

    from astuner.backbone import RunContext
    from astuner.errors import AstunerError, StorageError
    from astuner.records import prepare_run_dir
    from astuner.records.run_dir import mark_if_never_stepped
    from astuner.records.storage import disk_failure

    run = request.config
    try:
        run_dir = prepare_run_dir(request.exp_dir, run.experiment_name,
                                  run.merged if request.merged is None else request.merged, request.resume,
                                  layout=request.layout)
    except OSError as exc:  # the disk filled up (or turned read-only) since the checks
        why = disk_failure(exc, request.exp_dir)
        if why is None:
            raise
        raise StorageError(f"the run folder {Path(request.exp_dir) / run.experiment_name} cannot be written: "
                           f"{why}") from None
    for note in notes:  # what was checked (tasks, model, and for verl / trinity what the machine gives the run)
        say(note, logger)
    try:
        if request.on_prepared is not None:
            request.on_prepared(run_dir)
        aux = request.auxiliary_models() if callable(request.auxiliary_models) else request.auxiliary_models
        if viewer is not None:
            logger.info(f"trajectory viewer: {viewer.url} (this run, live; after it ends: astuner view {run_dir.root})")
            if not backbone.records_tokens:
                logger.warning(f"--with-logview: the {request.backbone} backbone does not record astuner's token-level "
                               f"trajectories; the viewer shows what the run folder holds")
        backbone.run(RunContext(config=run, plugins=request.plugins, run_dir=run_dir, with_ray=request.with_ray,
                                with_logview=request.with_logview, auxiliary_models=aux, key_name=request.key_name))
        from astuner.records.summary import closing_lines

        for line in closing_lines(run_dir, run.conf_path if request.layout != "tune" else None):
            logger.info(line)
    except BaseException as exc:
        mark_if_never_stepped(run_dir)
        why = str(exc) if isinstance(exc, StorageError) else \
            disk_failure(exc, run_dir.root) if isinstance(exc, Exception) and not isinstance(exc, AstunerError) else None
        if why is not None:
            again = "tune(resume=True)" if request.layout == "tune" else "--resume"
            raise StorageError(f"the run stopped: {why}; the complete checkpoints are kept: free space (or make it "
                               f"writable), then continue with {again}") from exc
        raise
    return run_dir


def _bind_logview(root: Path, request: RunRequest) -> Any:
    from astuner.viewer import start_viewer

    return start_viewer(root, port=request.logview_port, live=True, must_exist=False)
