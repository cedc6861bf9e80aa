"""Experiment trackers beside metrics.jsonl and tensorboard (`trainer_common.logger`): wandb, swanlab, mlflow.

Each is an optional install (`pip install 'astuner[monitors]'`) and writes into the run folder without a
network unless its own environment says otherwise:

- wandb: offline (`<run>/wandb/offline-run-*`) unless WANDB_MODE is set or WANDB_API_KEY is (then online);
  `wandb sync` uploads an offline run later;
- swanlab: offline (`<run>/swanlog/`) unless SWANLAB_MODE is set or SWANLAB_API_KEY is (then cloud);
- mlflow: the tracking server in MLFLOW_TRACKING_URI, else a local file store `<run>/mlruns` (mlflow ≥ 3
  keeps that store only when asked: MLFLOW_ALLOW_FILE_STORE is set for it).

Project and run names are the config's project_name and experiment_name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from astuner.errors import ConfigError

PACKAGES = {"wandb": "wandb", "swanlab": "swanlab", "mlflow": "mlflow"}


def tracker_env(loggers: list[str], root: Path) -> dict[str, str]:
    """Environment that keeps the chosen trackers offline and inside the run folder `root`, for the processes of
    verl and Trinity (which read these variables); what the user's environment already sets is kept."""
    env: dict[str, str] = {}
    if "wandb" in loggers:
        if not os.environ.get("WANDB_MODE") and not os.environ.get("WANDB_API_KEY"):
            env["WANDB_MODE"] = "offline"
        env["WANDB_DIR"] = os.environ.get("WANDB_DIR") or str(root)
    if "swanlab" in loggers:
        if not os.environ.get("SWANLAB_MODE") and not os.environ.get("SWANLAB_API_KEY"):
            env["SWANLAB_MODE"] = "offline"
        env["SWANLAB_LOG_DIR"] = os.environ.get("SWANLAB_LOG_DIR") or str(root / "swanlog")
    if "mlflow" in loggers:
        env["MLFLOW_TRACKING_URI"] = os.environ.get("MLFLOW_TRACKING_URI") or (root / "mlruns").absolute().as_uri()
        if env["MLFLOW_TRACKING_URI"].startswith("file:"):
            env["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return env


def _settings(name: str, root: Path) -> dict[str, str]:
    """The user's environment with tracker_env's defaults for `name`: the debug backbone's trackers decide
    mode and folder exactly as verl's and Trinity's processes do."""
    return {**os.environ, **tracker_env([name], root)}


def check_installed(loggers: list[str]) -> None:
    """One clear error, before anything starts, for a tracker that is chosen but not installed."""
    import importlib.util

    for name in loggers:
        package = PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            raise ConfigError(f"astuner.trainer_common.logger includes {name}, which is not installed; "
                              f"pip install 'astuner[monitors]' (or remove {name})")


class WandbMonitor:
    def __init__(self, project: str, experiment: str, root: Path, config: dict[str, Any]):
        import wandb

        env = _settings("wandb", root)
        self.run = wandb.init(project=project, name=experiment, dir=env["WANDB_DIR"],
                              mode=env.get("WANDB_MODE", "online"), config=config,
                              settings=wandb.Settings(console="off", x_disable_stats=True, disable_git=True))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        import wandb

        self.run.finish()
        wandb.teardown()  # its service process ends with the run, not with the interpreter


class SwanlabMonitor:
    def __init__(self, project: str, experiment: str, root: Path, config: dict[str, Any]):
        import swanlab

        env = _settings("swanlab", root)
        settings = swanlab.Settings(probe=swanlab.Settings.Probe(monitor=False, hardware=False, requirements=False,
                                                                 git=False), interactive=False)
        self.run = swanlab.init(project=project, experiment_name=experiment, mode=env.get("SWANLAB_MODE", "cloud"),
                                config=config, log_dir=env["SWANLAB_LOG_DIR"], settings=settings)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowMonitor:
    def __init__(self, project: str, experiment: str, root: Path, config: dict[str, Any]):
        import mlflow

        env = _settings("mlflow", root)
        if "MLFLOW_ALLOW_FILE_STORE" in env:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.mlflow = mlflow
        mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
        mlflow.set_experiment(project)
        self.run = mlflow.start_run(run_name=experiment)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        # mlflow refuses some characters in names (verl and Trinity replace '@' the same way)
        self.mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in metrics.items()}, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


MONITORS = {"wandb": WandbMonitor, "swanlab": SwanlabMonitor, "mlflow": MlflowMonitor}


def open_monitors(loggers: list[str], project: str, experiment: str, root: Path,
                  config: dict[str, Any]) -> list[Any]:
    check_installed(loggers)
    opened: list[Any] = []
    try:
        for name in loggers:
            if name in MONITORS:
                opened.append(MONITORS[name](project, experiment, root, config))
    except BaseException:
        for monitor in opened:  # the ones already open are finished, not left behind
            try:
                monitor.close()
            except Exception:  # noqa: BLE001 - the start's own error is the one to report
                pass
        raise
    return opened
