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


def test_a_loss_function_the_trinity_subtree_names_takes_its_own_arguments(capsys, tiny_model_dir, gsm8k_dir,
                                                                           monkeypatch, tmp_path):
    """agentscope-samples' email_search names Trinity's `rec` policy loss with its own arguments: astuner's PPO clip
    arguments were merged into them and Trinity's trainer died inside Ray (RECPolicyLossFn got clip_range_low). Now
    a function named instead of ours takes exactly the arguments given, and Trinity builds every function of the
    algorithm before anything is written: an argument it does not take is one line at --dry-run."""
    import yaml

    monkeypatch.chdir(tmp_path)
    rec = ("+trinity.algorithm.policy_loss_fn=rec", "+trinity.algorithm.policy_loss_fn_args.epsilon_low=0.2",
           "+trinity.algorithm.policy_loss_fn_args.epsilon_high=0.2",
           "+trinity.algorithm.policy_loss_fn_args.clip_mode=one-side",
           "+trinity.algorithm.kl_loss_fn=k2", "+trinity.algorithm.kl_loss_fn_args.kl_coef=0.0")
    gpu = ("astuner.trainer_common.device=cuda", "astuner.trainer_common.n_gpus_per_node=4")
    code, out, err = _dry_run(capsys, tiny_model_dir, gsm8k_dir, *gpu, *rec)
    assert code == 0, err
    algorithm = yaml.safe_load(out[out.index("mode:"):])["algorithm"]
    assert algorithm["policy_loss_fn"] == "rec"
    assert algorithm["policy_loss_fn_args"] == {"epsilon_low": 0.2, "epsilon_high": 0.2, "clip_mode": "one-side"}
    assert algorithm["kl_loss_fn_args"] == {"kl_coef": 0.0}
    assert algorithm["entropy_loss_fn_args"] == {"entropy_coef": 0.0}  # ours, for the function we name
    code, _, err = _dry_run(capsys, tiny_model_dir, gsm8k_dir, *gpu, *rec, "+trinity.algorithm.policy_loss_fn_args.epsilon=1")
    line = err.strip().splitlines()[-1]
    assert code == 2 and "Trinity-RFT rejects the translated config" in line and "unexpected keyword argument " \
        "'epsilon'" in line, err
    assert list(tmp_path.iterdir()) == []
