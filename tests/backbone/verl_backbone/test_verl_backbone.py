"""The verl backbone in an environment with verl installed (CI's verl job): verl's own trainer config
accepts every key we emit, and our agent loop, run against a fake server manager, returns
AgentLoopOutputs with the engine's ids, correct masks, log-probs and our judge's reward for a multi-turn
episode with a tool call. Skipped where verl is absent."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from tests.conftest import needs

needs("verl")

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.helpers import ScriptedEngine, prepare_seed_run  # noqa: E402

SEED = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"


@pytest.fixture
def prepared(tmp_path, tiny_model_dir, gsm8k_dir, monkeypatch):
    from astuner.backbone.verl.backbone import prepare

    monkeypatch.chdir(REPO_ROOT)
    return prepare_seed_run(prepare, tmp_path, tiny_model_dir, gsm8k_dir, ("+trainer.logger=[console]",))


def test_verl_accepts_every_translated_key(prepared):
    from omegaconf import OmegaConf

    run, root, path = prepared
    cfg = OmegaConf.load(path)
    rollout = cfg.actor_rollout_ref.rollout
    assert cfg.actor_rollout_ref.model.path == run.astuner.model.path
    assert (rollout.n, rollout.temperature, rollout.max_num_seqs, rollout.tensor_model_parallel_size) == (4, 0.7, 40, 1)
    assert rollout.max_model_len == 4096 and rollout.agent.default_agent_loop == "astuner_agent"
    assert cfg.trainer.default_local_dir == str(root / "checkpoints")
    assert list(cfg.trainer.logger) == ["console"]  # the user's top-level verl key won
    assert cfg.data.train_files == str(root / "verl_data" / "train.jsonl")
    rows = [json.loads(line) for line in (root / "verl_data" / "train.jsonl").read_text().splitlines()[:2]]
    assert rows[0]["agent_name"] == "astuner_agent" and rows[0]["prompt"][0]["role"] == "user"


def test_unknown_top_level_verl_key_is_a_config_error(prepared, tmp_path):
    from astuner.backbone.verl.compose import compose_verl_config
    from astuner.errors import ConfigError

    with pytest.raises(ConfigError, match="no key"):
        compose_verl_config({"trainer": {"no_such_knob": 1}})


class FakeServerManager:
    def __init__(self, engine):
        self.engine = engine

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from astuner.model.engines.base import SamplingParams

        result = await self.engine.generate(prompt_ids, SamplingParams(sampling_params["temperature"],
                                                                       sampling_params["top_p"],
                                                                       sampling_params["max_tokens"]))
        return SimpleNamespace(token_ids=result.token_ids, log_probs=result.logprobs, stop_reason="completed")


def test_agent_loop_returns_exact_outputs_for_a_multi_turn_episode(prepared, tokenizer):
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap

    from astuner.backbone.verl.agent_loop import AstunerAgentLoop

    run, root, path = prepared
    cfg = OmegaConf.load(path)
    registry = OmegaConf.load(root / "verl_agent_loops.yaml")[0]
    replies = ['Let me compute.\n<tool_call>\n{"name": "execute_python_code", "arguments": {"code": "print(48 + 24)"}}'
               '\n</tool_call>', "So she sold \\boxed{72} clips."]
    engine = ScriptedEngine(tokenizer, replies)
    loop = AstunerAgentLoop(DictConfigWrap(cfg), FakeServerManager(engine), tokenizer, None, None,
                            DictConfigWrap(cfg.data), astuner_config=registry.astuner_config,
                            astuner_roots=list(registry.astuner_roots))
    row = json.loads((root / "verl_data" / "train.jsonl").read_text().splitlines()[0])
    out = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **row))
    assert isinstance(out, AgentLoopOutput)
    assert out.reward_score == 1.0 and out.num_turns == 4
    assert out.prompt_ids == engine.prompts[0]
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    generated = [t for t, m in zip(out.response_ids, out.response_mask) if m]
    assert generated == engine.outputs[0] + engine.outputs[1]
    given = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if not m])
    assert "<tool_response>" in given and "72" in given
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask) if not m)


def test_dry_run_prints_the_config_composed_with_verls_own(tmp_path, capsys, monkeypatch):
    import yaml

    from tests.conftest import run_cli

    monkeypatch.chdir(tmp_path)  # the run folder the dry run checks: not the checkout's launcher_record/
    code, out, _ = run_cli(["--conf", str(SEED), "--backbone", "verl", "--dry-run"], capsys)
    assert code == 0
    cfg = yaml.safe_load(out)
    assert cfg["actor_rollout_ref"]["rollout"]["max_num_seqs"] == 40  # ours
    assert "ppo_micro_batch_size_per_gpu" in cfg["actor_rollout_ref"]["actor"]  # verl's own default keys
    code, _, err = run_cli(["--conf", str(SEED), "--backbone", "verl", "--dry-run", "+trainer.bogus_key=1"], capsys)
    assert code == 2 and "bogus_key" in err


def test_what_verls_own_validation_refuses_is_refused_at_dry_run(tmp_path, capsys, monkeypatch):
    """verl's `validate_config` ran once the run had started (its folder written); now before, and at --dry-run:
    sequence parallelism without padding removal (the CPU mode's) is one line naming the keys, and nothing is
    written."""
    from tests.conftest import run_cli

    monkeypatch.chdir(tmp_path)
    args = ["--conf", str(REPO_ROOT / "tutorial" / "example_agent_cpu" / "sensor_agent.yaml"), "--backbone", "verl",
            "--dry-run", "--exp-dir", str(tmp_path / "runs"), f"astuner.model.path={tmp_path / 'model'}"]
    code, _, err = run_cli([*args, "+actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"], capsys)
    line = err.strip()
    assert code == 2 and len(line.splitlines()) == 1, err
    assert "verl rejects the translated config: When using sequence parallelism" in line
    assert "actor_rollout_ref.actor.ulysses_sequence_parallel_size: 2" in line
    assert "use_remove_padding: False" in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "model").exists()
    code, _, err = run_cli(args, capsys)
    assert code == 0, err


# -- defects of the first real runs, each reproduced through verl's own code ---------------------------

def test_open_sections_and_dataclass_fields_accept_user_keys_closed_ones_do_not():
    from omegaconf import OmegaConf

    from astuner.backbone.verl.compose import compose_verl_config
    from astuner.errors import ConfigError

    cfg = compose_verl_config({"actor_rollout_ref": {
        "model": {"override_config": {"attn_implementation": "sdpa"}},
        "rollout": {"engine_kwargs": {"vllm": {"attention_backend": "TORCH_SDPA"}}},
        "actor": {"fsdp_config": {"mixed_precision": {"param_dtype": "fp32"}}}},
        "ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": {"A": "1"}}}}})
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.A == "1"
    # verl builds the section into its dataclass and reads the field (transformer_impl reads mixed_precision)
    from verl.utils.config import omega_conf_to_dataclass

    engine = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor.fsdp_config)
    assert engine.mixed_precision["param_dtype"] == "fp32"
    with pytest.raises(ConfigError, match="fsdp_config.no_such_knob"):
        compose_verl_config({"actor_rollout_ref": {"actor": {"fsdp_config": {"no_such_knob": 1}}}})
    assert OmegaConf.is_config(cfg)


def test_grad_clip_reaches_the_key_verls_engine_reads(prepared):
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    run, root, path = prepared
    optim = omega_conf_to_dataclass(OmegaConf.load(path).actor_rollout_ref.actor.optim)
    assert optim.clip_grad == run.astuner.trainer_common.optim.grad_clip


def test_tensorboard_and_cpu_platform_reach_every_ray_process(prepared):
    from omegaconf import OmegaConf

    from astuner.backbone.machine import cpu_mode

    run, root, path = prepared
    env = OmegaConf.load(path).ray_kwargs.ray_init.runtime_env.env_vars
    assert env.TENSORBOARD_DIR == str(root / "tensorboard")
    if cpu_mode(run):
        assert env.VERL_PLATFORM == "astuner_cpu" and env.VERL_USE_EXTERNAL_MODULES.endswith("cpu_platform")


def test_cpu_mode_only_where_asked(tmp_path):
    from astuner.backbone.verl.translate import translate_to_verl
    from astuner.config import load_run_config

    seed = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"
    gpu = translate_to_verl(load_run_config(seed, ["astuner.trainer_common.device=cuda", "astuner.trainer_common.n_gpus_per_node=1"]), tmp_path)
    cpu = translate_to_verl(load_run_config(seed, ["astuner.trainer_common.device=cpu"]), tmp_path)
    assert "VERL_PLATFORM" not in gpu["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert "override_config" not in gpu["actor_rollout_ref"]["model"]
    assert cpu["actor_rollout_ref"]["model"]["override_config"]["attn_implementation"] == "sdpa"
    assert cpu["actor_rollout_ref"]["actor"]["fsdp_config"]["strategy"] == "fsdp2"


def test_without_validation_verl_reads_the_training_file_and_validation_is_off(tmp_path, tiny_model_dir, gsm8k_dir,
                                                                               monkeypatch, tokenizer):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import create_rl_dataset

    from astuner.backbone.verl.backbone import prepare

    monkeypatch.chdir(REPO_ROOT)
    run, root, path = prepare_seed_run(prepare, tmp_path, tiny_model_dir, gsm8k_dir,
                                       ("astuner.task_reader.huggingface_dat_repo.validation_split=null",))
    cfg = OmegaConf.load(path)
    assert cfg.data.val_files == cfg.data.train_files and cfg.trainer.test_freq == -1
    assert not cfg.trainer.val_before_train
    dataset = create_rl_dataset(cfg.data.val_files, cfg.data, tokenizer, None, is_train=False)  # verl's own builder
    assert len(dataset) > 0


def test_relative_and_tiny_model_paths_are_resolved_as_in_debug(tmp_path, gsm8k_dir, monkeypatch):
    from omegaconf import OmegaConf

    from astuner.backbone.verl.backbone import prepare

    monkeypatch.chdir(tmp_path)
    run, root, path = prepare_seed_run(prepare, tmp_path, "models/tiny", gsm8k_dir,
                                       ("astuner.model.tiny={seed: 0, hidden_size: 64, layers: 1, heads: 2}",))
    model_path = OmegaConf.load(path).actor_rollout_ref.model.path
    assert model_path == str(tmp_path / "models" / "tiny") and (tmp_path / "models" / "tiny" / "config.json").exists()


def test_batching_that_verl_would_assert_on_is_refused_before_launch():
    from astuner.backbone.verl.checks import check_batching
    from astuner.backbone.verl.translate import agent_workers
    from astuner.config import load_run_config
    from astuner.errors import ConfigError

    seed = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"
    run = load_run_config(seed, ["astuner.data.train_batch_size=10", "astuner.trainer_common.mini_batch_num=3"])
    with pytest.raises(ConfigError, match="multiple of astuner.trainer_common.mini_batch_num"):
        check_batching(run, 100)
    with pytest.raises(ConfigError, match="fewer than"):
        check_batching(load_run_config(seed), 5)
    assert agent_workers(12, 8) == 6 and agent_workers(7, 8) == 7 and agent_workers(13, 8) == 1
    assert 264 * 4 % agent_workers(264 * 4, 8) == 0


def test_a_model_too_big_for_the_gpus_is_refused_before_launch(tmp_path):
    import json

    from astuner.backbone.verl.checks import check_memory
    from astuner.config import load_run_config
    from astuner.errors import ConfigError

    seed = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"
    run = load_run_config(seed)
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2 * 14_700_000_000}}))
    with pytest.raises(ConfigError, match="param_offload"):
        check_memory(run, str(tmp_path), 80 * 2**30, {})
    offload = {"actor_rollout_ref": {"actor": {"fsdp_config": {"param_offload": True, "optimizer_offload": True}}}}
    check_memory(run, str(tmp_path), 80 * 2**30, offload)
    check_memory(load_run_config(seed, ["astuner.trainer_common.n_gpus_per_node=8"]), str(tmp_path), 80 * 2**30, {})


def _episode(samples, **kw):
    from astuner.rollout.manager import EpisodeResult
    from astuner.schema import Task

    return EpisodeResult(task=Task(task_id="t", main_query="q"), repeat_index=0, episode_uuid="u", samples=samples, **kw)


def _sample(prompt, response, mask, reward=1.0):
    from astuner.schema.sample import Sample

    return Sample(task_id="t", episode_uuid="u", repeat_index=0, input_ids=prompt + response, prompt_length=len(prompt),
                  loss_mask=mask, logprobs=[-0.5 if m else 0.0 for m in mask], reward=reward, num_calls=sum(mask))


def test_one_output_per_episode_with_the_same_extra_keys_and_capped_lengths():
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    from astuner.backbone.verl.agent_loop import EXTRA_KEYS, episode_to_output

    two = _episode([_sample([1, 2], [3, 4, 5], [1, 0, 1]), _sample([1, 2, 3], [6], [1])], is_success=True)
    out = episode_to_output(two, prompt_length=8, response_length=8, fallback_prompt=[9], fallback_token=0)
    assert isinstance(out, AgentLoopOutput) and out.response_ids == [3, 4, 5]  # the most trained tokens
    info = out.extra_fields["reward_extra_info"]
    assert tuple(info) == EXTRA_KEYS and info["dropped_samples"] == 1.0 and info["num_samples"] == 2.0
    none = episode_to_output(_episode([], failed=True), prompt_length=4, response_length=8,
                             fallback_prompt=list(range(10)), fallback_token=0)
    assert tuple(none.extra_fields["reward_extra_info"]) == EXTRA_KEYS
    assert none.prompt_ids == [6, 7, 8, 9] and none.response_mask == [0]
    long = episode_to_output(_episode([_sample(list(range(6)), [7, 8, 9], [1, 1, 1])]), prompt_length=4,
                             response_length=2, fallback_prompt=[9], fallback_token=0)
    assert long.prompt_ids == [2, 3, 4, 5] and long.response_ids == [7, 8] and long.response_mask == [0, 0]
    assert long.extra_fields["reward_extra_info"]["truncated"] == 1.0


def test_a_group_short_of_a_failed_episode_leaves_verls_loss(monkeypatch):
    """Our subclass of verl's AgentLoopManager, called as verl's trainer calls its own (no await): after verl's
    manager gathered the episodes, a training group with a failed episode and a survivor has every row's
    response_mask at 0 and marked group_dropped; a group whose every episode failed, and validation rows, stay."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    from astuner.backbone.verl.short_groups import ShortGroupsAgentLoopManager
    from astuner.backbone.verl.translate import MODE_KEY

    uids = ["a", "a", "b", "b", "c", "c", "v", "v"]
    modes = ["train"] * 6 + ["val"] * 2
    failed = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    prompts = DataProto.from_dict(non_tensors={"uid": np.array(uids, dtype=object),
                                               "extra_info": np.array([{MODE_KEY: m} for m in modes], dtype=object)})
    gathered = DataProto.from_dict(tensors={"response_mask": torch.ones(8, 3, dtype=torch.int64)},
                                   non_tensors={"failed": np.array(failed), "group_dropped": np.zeros(8)},
                                   meta_info={"timing": {}})

    async def verls_own(self, batch):
        assert batch is prompts
        return gathered

    monkeypatch.setattr(AgentLoopManager, "generate_sequences", verls_own)
    manager = ShortGroupsAgentLoopManager.__new__(ShortGroupsAgentLoopManager)
    out = manager.generate_sequences(prompts)
    assert out.batch["response_mask"].sum(-1).tolist() == [0, 0, 3, 3, 3, 3, 3, 3]
    assert out.non_tensor_batch["group_dropped"].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]
    assert out.meta_info["timing"] == {"astuner/short_groups": 2.0, "astuner/dropped_short_groups": 1.0}


def test_a_reply_that_fills_max_tokens_without_a_stop_token_is_cut():
    from astuner.backbone.verl.agent_loop import VerlServerEngine
    from astuner.model.engines.base import SamplingParams

    class Server:
        def __init__(self, ids, reason="completed"):
            self.ids, self.reason = ids, reason

        async def generate(self, request_id, *, prompt_ids, sampling_params):
            return SimpleNamespace(token_ids=self.ids, log_probs=[-1.0] * len(self.ids), stop_reason=self.reason)

    sampling = SamplingParams(1.0, 1.0, 3)
    assert asyncio.run(VerlServerEngine(Server([5, 6, 7]), [2]).generate([1], sampling)).finish_reason == "length"
    assert asyncio.run(VerlServerEngine(Server([5, 6, 2]), [2]).generate([1], sampling)).finish_reason == "stop"
    assert asyncio.run(VerlServerEngine(Server([5, 2]), [2]).generate([1], sampling)).finish_reason == "stop"
    with pytest.raises(RuntimeError, match="aborted"):
        asyncio.run(VerlServerEngine(Server([], "aborted"), [2]).generate([1], sampling))


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_advantages_equal_verls_own(norm_by_std):
    """One algorithm on every backbone: the debug trainer's GRPO advantages are verl's
    (compute_grpo_outcome_advantage): sample std, a group of one at mean 0 and std 1, equal rewards at 0."""
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from tests.helpers import GRPO_ROWS, our_grpo_advantages

    rewards = torch.tensor([[0.0, reward] for _, reward in GRPO_ROWS])  # the score on the last response token
    theirs, _ = compute_grpo_outcome_advantage(rewards, torch.ones_like(rewards),
                                               np.array([group for group, _ in GRPO_ROWS], dtype=object),
                                               norm_adv_by_std_in_grpo=norm_by_std)
    assert theirs[:, -1].tolist() == pytest.approx(our_grpo_advantages(norm_by_std), abs=1e-5)


def test_dual_clip_ppo_loss_equals_verls_own():
    """The debug trainer's per-token PPO loss is verl's (compute_policy_loss: dual clip, clamped log-ratio)."""
    import torch
    from verl.trainer.ppo.core_algos import compute_policy_loss

    from astuner.algorithm.losses import ppo_clip_loss

    gen = torch.Generator().manual_seed(0)
    old = torch.randn(4, 6, generator=gen)
    logp = old + 2.0 * torch.randn(4, 6, generator=gen)  # ratios from ~e^-6 to ~e^6: every branch
    logp[0, 0] = old[0, 0] + 60.0  # past the clamp
    adv = torch.randn(4, 1, generator=gen).expand(4, 6)
    mask = torch.ones(4, 6)
    ours, _ = ppo_clip_loss(logp, old, adv, 0.2, 0.28, clip_ratio_c=3.0)
    theirs = compute_policy_loss(old, logp, adv, mask, cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=3.0,
                                 loss_agg_mode="token-mean")[0]
    assert float(ours.mean()) == pytest.approx(float(theirs), rel=1e-5)


def test_trackers_reach_verls_logger_offline_in_the_run_folder(tmp_path, monkeypatch):
    from verl.utils.tracking import Tracking

    from astuner.backbone.verl.translate import translate_to_verl
    from astuner.config import load_run_config

    for key in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    run = load_run_config(SEED, ["astuner.trainer_common.logger=[console,tensorboard,wandb,mlflow]"])
    verl = translate_to_verl(run, tmp_path)
    assert verl["trainer"]["logger"] == ["console", "tensorboard", "wandb", "mlflow"]
    assert set(verl["trainer"]["logger"]) <= set(Tracking.supported_backend)  # verl's own list of names
    env = verl["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == str(tmp_path)
    assert env["MLFLOW_TRACKING_URI"] == (tmp_path / "mlruns").as_uri() and env["MLFLOW_ALLOW_FILE_STORE"] == "true"
    monkeypatch.setenv("WANDB_API_KEY", "k")  # a user with a key logs online, as wandb would
    assert "WANDB_MODE" not in translate_to_verl(run, tmp_path)["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]


def _trainer_module(kept: list, fail: bool = False) -> SimpleNamespace:
    """A stand-in for verl.trainer.ppo.ray_trainer whose `fit` uses trackers as verl's does (a `Tracking` from
    verl.utils.tracking, a row per step) and whose `Tracking` outlives `fit` (`kept`), as in the CI run that
    lost its last step."""
    class RayPPOTrainer:
        def fit(self):
            from verl.utils.tracking import Tracking

            logger = Tracking(project_name="p", experiment_name="e", default_backend=["wandb"], config=None)
            kept.append(logger)
            for step in (1, 2):
                logger.log(data={"critic/score/mean": step / 10}, step=step)
            if fail:
                raise RuntimeError("step 3 failed")

    return SimpleNamespace(RayPPOTrainer=RayPPOTrainer)


@pytest.mark.parametrize("fail", [False, True])
def test_verls_trackers_hold_the_last_step_when_fit_ends(tmp_path, monkeypatch, fail):
    """wandb keeps a step's row until a later step or finish(); verl's v0 fit never calls finish(). Through
    verl's own Tracking and wandb's own offline files: both steps are there once fit returns (or raises), while
    the process still runs (without the fix the last one is missing: wandb writes it at finish only)."""
    wandb = pytest.importorskip("wandb")
    from astuner.backbone.verl.trackers import finish_after_fit
    from tests.records.tracker_files import wandb_scalars

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    wandb.teardown()  # wandb reads WANDB_DIR once per process setup
    kept: list = []
    module = _trainer_module(kept, fail)
    finish_after_fit(module)
    finish_after_fit(module)  # once per process, however often the module is patched
    if fail:
        with pytest.raises(RuntimeError, match="step 3 failed"):
            module.RayPPOTrainer().fit()
    else:
        module.RayPPOTrainer().fit()
    assert kept and kept[0]._finished  # finished as fit ended, though something still holds it
    assert wandb_scalars(tmp_path)["critic/score/mean"] == [(1, 0.1), (2, 0.2)]
    wandb.teardown()


def test_every_verl_process_loads_the_tracker_hook(tmp_path):
    from astuner.backbone.verl.translate import TRACKERS_MODULE, translate_to_verl
    from astuner.config import load_run_config

    seed = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"
    for device in ("cpu", "cuda"):
        run = load_run_config(seed, [f"astuner.trainer_common.device={device}", "astuner.trainer_common.n_gpus_per_node=1"])
        env = translate_to_verl(run, tmp_path)["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
        assert TRACKERS_MODULE in env["VERL_USE_EXTERNAL_MODULES"].split(",")


def test_an_endpoints_key_reaches_verls_workers_but_not_its_printed_config(tiny_model_dir, tmp_path, monkeypatch):
    """run_ppo prints its ray.init arguments and its task runner the config: the key goes to Ray's workers through
    our own connection (verl's default runtime environment merged in), in neither."""
    import ray
    from omegaconf import OmegaConf

    from astuner.backbone.verl.backbone import connect_with_keys, dry_run_config
    from astuner.config import load_run_config

    monkeypatch.setenv("ASTUNER_TEST_JUDGE_KEY", "sk-secret-1")
    run = load_run_config(REPO_ROOT / "tutorial" / "example_tool_cpu" / "calc_agent.yaml", overrides=[
        f"astuner.model.path={tiny_model_dir}", "astuner.trainer_common.device=cpu",
        "+astuner.auxiliary_models.judge={base_url: 'http://127.0.0.1:9/v1', model: m, "
        "api_key_env: ASTUNER_TEST_JUDGE_KEY}"])
    config = OmegaConf.create(dry_run_config(run, tmp_path))
    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.update(kwargs))
    connect_with_keys(config, run)
    env = seen["runtime_env"]["env_vars"]
    assert env["ASTUNER_TEST_JUDGE_KEY"] == "sk-secret-1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in env  # the config's, verl's
    assert "sk-secret-1" not in OmegaConf.to_yaml(config)
