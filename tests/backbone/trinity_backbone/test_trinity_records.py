"""Trinity's tensorboard scalars land in our run folder's tensorboard/ (Trinity's own check moves its monitor
folder under its checkpoint tree). Written through Trinity's own TensorboardMonitor. Trinity environment only."""

from __future__ import annotations

import pytest

from tests.conftest import needs

needs("trinity")

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.helpers import prepare_seed_run  # noqa: E402


def test_trinitys_monitor_writes_into_the_run_folder(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from trinity.utils.monitor import MONITOR

    from astuner.backbone.trinity.backbone import checked_config, prepare

    monkeypatch.chdir(REPO_ROOT)
    run, root, path = prepare_seed_run(prepare, tmp_path, tiny_model_dir, gsm8k_dir,
                                       ("astuner.trainer_common.n_gpus_per_node=4", "astuner.trainer_common.device=cuda",))
    config = checked_config(path, root / "tensorboard")
    monitor = MONITOR.get(config.monitor.monitor_type)(config.project, config.group, config.name, "explorer", config)
    monitor.log({"rollout/reward": 0.5}, step=1)
    monitor.close()
    assert list((root / "tensorboard" / "explorer").glob("events.out.tfevents.*"))
