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


def test_what_trinitys_trainer_workers_refuse_is_refused_before_the_run_folder(capsys, tiny_model_dir, gsm8k_dir,
                                                                                monkeypatch, tmp_path):
    """Trinity's trainer builds a verl config for its workers, which check it as they start inside Ray (after the
    run folder exists): sequence parallelism without padding removal killed the trainer there. Now that verl config
    goes through verl's own dataclasses and the actor's validate before anything is written: one line naming the
    trinity: subtree's keys."""
    monkeypatch.chdir(tmp_path)
    gpus = ("astuner.trainer_common.n_gpus_per_node=4", "astuner.trainer_common.device=cuda")
    code, _, err = _dry_run(capsys, tiny_model_dir, gsm8k_dir, *gpus,
                            "+trinity.trainer.ulysses_sequence_parallel_size=2", "+trinity.trainer.use_remove_padding=false")
    line = err.strip().splitlines()[-1]  # (Trinity's validators log to the captured stream beside it)
    assert code == 2 and line.startswith("astuner: error: "), err
    assert "Trinity-RFT rejects the translated config: When using sequence parallelism" in line
    assert "trinity.trainer.ulysses_sequence_parallel_size: 2" in line and "trinity.trainer.use_remove_padding: False" in line
    assert list(tmp_path.iterdir()) == []
    code, _, err = _dry_run(capsys, tiny_model_dir, gsm8k_dir, *gpus, "+trinity.trainer.ulysses_sequence_parallel_size=2")
    assert code == 0, err  # with Trinity's padding removal (its default on GPUs), sequence parallelism is fine
