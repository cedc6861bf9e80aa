"""Trinity's mode follows the run's GPUs: one GPU runs colocated (Trinity's own validator accepts the
translated config and gives the trainer the GPU), a split that leaves the trainer no GPU is refused before
launch naming the setting, otherwise explorer and trainer share the GPUs. Runs in the Trinity environment."""

from __future__ import annotations

import pytest

from tests.conftest import needs

needs("trinity")

import yaml  # noqa: E402

from astuner.backbone.trinity.translate import translate_to_trinity  # noqa: E402
from astuner.config import load_run_config  # noqa: E402
from astuner.errors import ConfigError  # noqa: E402
from tests.conftest import REPO_ROOT  # noqa: E402

SEED = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"  # asks for 2 vLLM engines


def _validated_by_trinity(overrides, tmp_path):
    from trinity.common.config import load_config
    from trinity.common.config_validator import RayClusterConfigValidator

    path = tmp_path / "trinity_config.yaml"
    path.write_text(yaml.safe_dump(translate_to_trinity(load_run_config(SEED, overrides), tmp_path)))
    config = load_config(str(path))
    RayClusterConfigValidator().validate(config)  # Trinity's own GPU allocation
    return config


def test_one_gpu_runs_explorer_and_trainer_colocated(tmp_path):
    config = _validated_by_trinity(["astuner.trainer_common.n_gpus_per_node=1", "astuner.trainer_common.device=cuda",
                                    "astuner.trainer_common.trinity_only__n_vllm_engine=1"], tmp_path)
    assert config.mode == "colocate" and config.explorer.rollout_model.engine_num == 1
    assert config.cluster.trainer_gpu_num == 1


def test_engines_that_leave_the_trainer_no_gpu_are_refused_before_launch(tmp_path):
    run = load_run_config(SEED, ["astuner.trainer_common.n_gpus_per_node=2", "astuner.trainer_common.device=cuda"])
    with pytest.raises(ConfigError, match="trinity_only__n_vllm_engine"):
        translate_to_trinity(run, tmp_path)


def test_several_gpus_are_split_between_engines_and_trainer(tmp_path):
    config = _validated_by_trinity(["astuner.trainer_common.n_gpus_per_node=4", "astuner.trainer_common.device=cuda"], tmp_path)
    assert config.mode == "both" and config.cluster.explorer_gpu_num == 2 and config.cluster.trainer_gpu_num == 2
