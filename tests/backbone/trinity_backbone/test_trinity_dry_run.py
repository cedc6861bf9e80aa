"""--dry-run --backbone trinity runs Trinity-RFT's own full check (`check_and_update()`), so a config the run
would reject is rejected by the dry run too, and nothing is left on disk. Runs in the Trinity environment."""

from __future__ import annotations

import pytest

from tests.conftest import needs

needs("trinity")

from tests.conftest import REPO_ROOT, run_cli  # noqa: E402

SEED = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"


def _dry_run(capsys, tiny_model_dir, gsm8k_dir, *overrides):
    return run_cli(["--conf", str(SEED), "--backbone", "trinity", "--dry-run", f"astuner.model.path={tiny_model_dir}",
                    f"astuner.task_reader.huggingface_dat_repo.dataset_path={gsm8k_dir}",
                    "astuner.rollout.max_model_len=4096", "astuner.data.max_prompt_length=1024",  # the tiny model: 4096
                    "astuner.data.max_response_length=3072", *overrides], capsys)


def test_dry_run_rejects_what_trinitys_validators_reject(capsys, tiny_model_dir, gsm8k_dir, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, _, err = _dry_run(capsys, tiny_model_dir, gsm8k_dir, "astuner.trainer_common.n_gpus_per_node=4", "astuner.trainer_common.device=cuda",
                            "+trinity.explorer.rollout_model.engine_num=4")
    assert code == 2 and "Not enough GPUs for trainer" in err
    code, out, _ = _dry_run(capsys, tiny_model_dir, gsm8k_dir, "astuner.trainer_common.n_gpus_per_node=4", "astuner.trainer_common.device=cuda")
    assert code == 0 and "engine_num: 2" in out
    assert list(tmp_path.iterdir()) == []  # the validators' folders went to a temporary folder
