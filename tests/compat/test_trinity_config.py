"""`tune(config_path=<a Trinity-RFT config>)`: the file agentscope.tuner takes, translated key by key
(astuner/compat/trinity/config.py): the mapping table, keys refused on debug / verl and handed to Trinity-RFT on
the trinity backbone, and a realistic Trinity config training end to end on the debug backbone."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from astuner.backbone.translate_common import deep_merge
from astuner.errors import UserError
from astuner.tuner import AlgorithmConfig, tune
from astuner.compat.trinity import config as tc
from tests.api.test_tune_api import judge_function, run_react_agent
from tests.conftest import needs

# the least a Trinity config needs here: an algorithm, a model, a taskset
MINIMAL = {"algorithm": {"algorithm_type": "multi_step_grpo", "repeat_times": 4},
           "model": {"model_path": "Qwen/Qwen3-0.6B", "max_model_len": 4096},
           "buffer": {"explorer_input": {"taskset": {"path": "openai/gsm8k", "subset_name": "main", "split": "train"}}}}


def translated(extra: dict, backbone: str = "debug", **kwargs) -> dict:
    return tc.translate(deep_merge(MINIMAL, extra), backbone=backbone, source="t.yaml", **kwargs).tree


def at(tree: dict, dotted: str):
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def eval_set(**keys) -> dict:
    return {"buffer": {"explorer_input": {"eval_tasksets": [{"path": "openai/gsm8k", "subset_name": "main",
                                                             "split": "test", **keys}]}}}


def test_a_trinity_config_is_told_from_an_astuner_yaml_by_its_keys():
    assert tc.is_trinity_config({"project": "p", "algorithm": {}, "buffer": {}})
    assert not tc.is_trinity_config({"astuner": {}, "trainer": {"total_epochs": 1}})  # astuner + verl keys
    assert not tc.is_trinity_config({"hydra": {}}) and not tc.is_trinity_config({}) and not tc.is_trinity_config([])


@pytest.mark.parametrize("extra,key,value", [
    ({"project": "p"}, "project_name", "p"),
    ({"name": "run1"}, "experiment_name", "run1"),
    ({"algorithm": {"algorithm_type": "grpo"}}, "trainer_common.algorithm.adv_estimator", "grpo"),
    ({}, "trainer_common.algorithm.adv_estimator", "multi_step_grpo"),
    ({"algorithm": {"repeat_times": 6}}, "rollout.num_repeat", 6),
    ({"algorithm": {"optimizer": {"lr": 3e-6}}}, "trainer_common.optim.lr", 3e-6),
    ({"algorithm": {"optimizer": {"lr_warmup_steps": 5}}}, "trainer_common.optim.warmup_steps", 5),
    ({"algorithm": {"optimizer": {"lr_warmup_steps_ratio": 0.1}}, "trainer": {"total_steps": 50}},
     "trainer_common.optim.warmup_steps", 5),
    ({"algorithm": {"optimizer": {"weight_decay": 0.1}}}, "trainer_common.optim.weight_decay", 0.1),
    ({"algorithm": {"optimizer": {"betas": [0.9, 0.95]}}}, "trainer_common.optim.betas", [0.9, 0.95]),
    ({"algorithm": {"optimizer": {"clip_grad": 0.5}}}, "trainer_common.optim.grad_clip", 0.5),
    ({"trainer": {"grad_clip": 0.5}}, "trainer_common.optim.grad_clip", 0.5),
    ({"algorithm": {"loss_agg_mode": "seq-mean-token-mean"}}, "trainer_common.algorithm.loss_agg_mode",
     "seq-mean-token-mean"),
    ({"algorithm": {"policy_loss_fn_args": {"clip_range": 0.3}}}, "trainer_common.algorithm.clip_ratio_low", 0.3),
    ({"algorithm": {"policy_loss_fn_args": {"clip_range": 0.3, "clip_range_high": 0.28}}},
     "trainer_common.algorithm.clip_ratio_high", 0.28),
    ({"algorithm": {"policy_loss_fn_args": {"clip_ratio_c": 5.0}}}, "trainer_common.algorithm.clip_ratio_c", 5.0),
    ({}, "trainer_common.algorithm.use_kl_loss", False),
    ({"algorithm": {"kl_loss_fn": "none"}}, "trainer_common.algorithm.use_kl_loss", False),
    ({"algorithm": {"kl_loss_fn": "low_var_kl"}}, "trainer_common.algorithm.kl_loss_type", "low_var_kl"),
    ({"algorithm": {"kl_loss_fn": "k1"}}, "trainer_common.algorithm.kl_loss_type", "kl"),
    ({"algorithm": {"kl_loss_fn": "k1", "kl_loss_fn_args": {"kl_coef": 0.01}}},
     "trainer_common.algorithm.kl_loss_coef", 0.01),
    ({"algorithm": {"entropy_loss_fn_args": {"entropy_coef": 0.01}}}, "trainer_common.algorithm.entropy_coeff", 0.01),
    ({"model": {"model_path": "/models/q"}}, "model.path", "/models/q"),
    ({}, "data.max_prompt_length", 2048),  # Trinity's split of max_model_len when neither is set
    ({"model": {"max_response_tokens": 1024}}, "data.max_prompt_length", 3072),
    ({"model": {"max_response_tokens": 1024}}, "rollout.max_response_length_in_one_turn", 1024),
    ({"model": {"max_model_len": None, "max_prompt_tokens": 100, "max_response_tokens": 50}}, "rollout.max_model_len",
     150),
    ({"model": {"temperature": 0.7}}, "rollout.temperature", 0.7),
    ({}, "rollout.temperature", 1.0),  # Trinity's default, not astuner's
    ({"model": {"temperature": 0.7}, "buffer": {"explorer_input": {"taskset": {"rollout_args": {"temperature": 0.5}}}}},
     "rollout.temperature", 0.5),
    ({"buffer": {"explorer_input": {"taskset": {"rollout_args": {"top_p": 0.9, "max_tokens": 256}}}}},
     "rollout.max_response_length_in_one_turn", 256),
    ({"model": {"enable_thinking": False}}, "rollout.chat_template_kwargs.enable_thinking", False),
    ({"model": {"lora_configs": [{"lora_rank": 16}]}}, "model.lora",
     {"rank": 16, "alpha": 32, "target_modules": "all-linear"}),
    ({"model": {"lora_configs": [{"name": "a", "target_modules": "q_proj, v_proj"}]}}, "model.lora.target_modules",
     ["q_proj", "v_proj"]),
    ({"buffer": {"batch_size": 16}}, "data.train_batch_size", 16),
    ({}, "data.train_batch_size", 1),
    ({"buffer": {"total_epochs": 3}}, "trainer_common.total_epochs", 3),
    ({"buffer": {"total_steps": 10}, "trainer": {"total_steps": 7}}, "trainer_common.total_training_steps", 7),
    ({"explorer": {"max_timeout": 600}}, "rollout.episode_timeout_s", 600),
    ({}, "rollout.episode_timeout_s", 1800),
    ({"explorer": {"runner_per_model": 4, "rollout_model": {"engine_num": 2}}}, "rollout.max_env_worker", 32),
    ({"explorer": {"rollout_model": {"engine_num": 2}}}, "trainer_common.trinity_only__n_vllm_engine", 2),
    ({"explorer": {"rollout_model": {"tensor_parallel_size": 2}}}, "rollout.tensor_model_parallel_size", 2),
    ({"explorer": {"rollout_model": {"tool_call_parser": "hermes"}}}, "rollout.tool_call_parser", "hermes"),
    ({"explorer": {"rollout_model": {"reasoning_parser": "deepseek_r1"}}}, "rollout.reasoning_parser", "deepseek_r1"),
    ({"explorer": {"rollout_model": {"extra_engine_args": {"max_num_seqs": 32}}}}, "rollout.max_num_seqs", 32),
    ({"explorer": {"rollout_model": {"gpu_memory_utilization": 0.7}}}, "rollout.gpu_memory_utilization", 0.7),
    ({"trainer": {"save_interval": 10}}, "trainer_common.save_freq", 10),
    ({}, "trainer_common.save_freq", -1),  # Trinity's 0: at the end only
    ({"trainer": {"max_token_len_per_gpu": 8192}}, "trainer_common.max_token_len_per_micro_batch", 8192),
    ({"trainer": {"max_checkpoints_to_keep": 3}}, "trainer_common.max_checkpoints_to_keep", 3),
    ({"trainer": {"trainer_config": {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}}}, "trainer_common.ppo_epochs",
     2),
    ({"monitor": {"monitor_type": "wandb"}}, "trainer_common.logger", ["console", "wandb"]),
    ({"cluster": {"node_num": 2, "gpu_per_node": 4}}, "trainer_common.n_gpus_per_node", 4),
    ({"cluster": {"node_num": 2, "gpu_per_node": 4}}, "trainer_common.nnodes", 2),
    ({}, "task_reader.huggingface_dat_repo", {"dataset_path": "openai/gsm8k", "dataset_name": "main",
                                               "training_split": "train", "validation_split": None}),
    ({}, "trainer_common.test_freq", -1),  # no eval taskset: no validation
    ({"buffer": {"explorer_input": {"taskset": {"format": {"prompt_key": "problem"}}}}}, "task_reader.query_field",
     "problem"),
    ({}, "task_reader.task_selector.selector_type", "sequential"),
    ({"buffer": {"explorer_input": {"taskset": {"data_selector": {"selector_type": "shuffle", "seed": 3}}}}},
     "task_reader.task_selector.seed", 3),
    ({"buffer": {"explorer_input": {"taskset": {"task_selector": {"selector_type": "random"}}}}},
     "task_reader.task_selector.selector_type", "random"),
    (eval_set(), "task_reader.huggingface_dat_repo.validation_split", "test"),
    (eval_set(path="other/set"), "task_reader.huggingface_dat_repo.validation_dataset_path", "other/set"),
    (eval_set(), "trainer_common.test_freq", 100),
    ({**eval_set(), "explorer": {"eval_interval": 5}}, "trainer_common.test_freq", 5),
    (eval_set(), "trainer_common.val_before_train", True),
    ({**eval_set(), "explorer": {"eval_on_startup": False}}, "trainer_common.val_before_train", False),
    (eval_set(repeat_times=4, rollout_args={"temperature": 0.0}), "rollout.val_kwargs",
     {"temperature": 0.0, "top_p": 1.0, "num_repeat": 4}),
    ({"data_processor": {"experience_pipeline": {"operators": [{"name": "pass_rate_calculator"}]}}},
     "data_processor.experience_pipeline.operators", [{"name": "pass_rate_calculator"}]),
])
def test_each_trinity_key_becomes_its_astuner_key(extra, key, value):
    assert at(translated(extra)["astuner"], key) == value


def test_placement_of_the_run_folder_and_continuing():
    t = tc.translate(deep_merge(MINIMAL, {"checkpoint_root_dir": "runs", "project": "p", "group": "g",
                                          "continue_from_checkpoint": False}), backbone="debug", source="t.yaml")
    assert tc.run_parent(t, "p", tc.Path("/w")) == tc.Path("/w/runs/p/g") and not t.continue_from_checkpoint
    plain = tc.translate(MINIMAL, backbone="debug", source="t.yaml")
    assert tc.run_parent(plain, "p", tc.Path("/w")) == tc.Path("/w/checkpoints/p") and plain.continue_from_checkpoint
    assert tc.run_parent(tc.translate(deep_merge(MINIMAL, {"checkpoint_root_dir": "/abs"}), backbone="debug",
                                      source="t.yaml"), "p", tc.Path("/w")) == tc.Path("/abs/p")


@pytest.mark.parametrize("backbone", ["debug", "verl"])
def test_a_key_without_astuner_meaning_is_refused_on_debug_and_verl_naming_it(backbone):
    with pytest.raises(UserError) as info:
        translated({"trainer": {"critic_warmup": 5}, "algorithm": {"kl_loss_fn": "k2"}}, backbone=backbone)
    message = str(info.value)
    assert "\n" not in message and message.startswith("t.yaml (a Trinity-RFT config): ")
    assert "trainer.critic_warmup=5" in message and "algorithm.kl_loss_fn='k2'" in message
    assert f"which the {backbone} backbone cannot honour" in message and 'backbone="trinity"' in message


@pytest.mark.parametrize("backbone", ["debug", "verl", "trinity"])
def test_a_trinity_schedule_that_rolls_out_ahead_is_a_warning_off_trinity(backbone):
    """A Trinity file's sync_interval / sync_offset keep their meaning; on debug and verl, where the user may not
    expect an off-policy run, one WARNING line says so with the file's keys that keep it synchronous."""
    warnings = translation({"synchronizer": {"sync_interval": 2, "sync_offset": 1}}, backbone).warnings
    if backbone == "trinity":
        assert warnings == []
    else:
        assert warnings == [f"t.yaml: synchronizer.sync_interval 2, sync_offset 1: this {backbone} run is off-policy, "
                            f"its samples up to 2 version(s) older than the weights they train (docs/off_policy.md); "
                            f"sync_interval 1 and sync_offset 0 in that file keep it synchronous"]
    assert translation({"synchronizer": {"sync_interval": 1}}, backbone).warnings == []
    assert translation({"synchronizer": {"sync_offset": 1}, "astuner": {"trainer_common": {"off_policy": {
        "max_staleness": 0}}}}, backbone).warnings == []


def translation(extra: dict, backbone: str = "debug") -> tc.Translation:
    return tc.translate(deep_merge(MINIMAL, extra), backbone=backbone, source="t.yaml")


RUNTIME = {"explorer": {"over_rollout": {"ratio": 0.2, "wait_after_min": 15}, "dynamic_timeout": {"enable": True},
                        "max_repeat_times_per_runner": 1, "rollout_model": {"enforce_eager": True}},
           "trainer": {"ulysses_sequence_parallel_size": 2, "use_dynamic_bsz": False, "param_offload": True},
           "buffer": {"trainer_input": {"experience_buffer": {"name": "w", "storage_type": "queue",
                                                              "max_read_timeout": 7200}}}}


@pytest.mark.parametrize("backbone", ["debug", "verl"])
def test_keys_that_only_tune_trinitys_runtime_are_applied_on_trinity_only_and_listed(backbone):
    """One config, debug first: what only shapes how Trinity runs (throughput, timeouts, queues, parallelism) is
    listed once, and the run proceeds; with backbone trinity the same keys go to Trinity as they are."""
    t = translation(RUNTIME, backbone=backbone)
    assert sorted(t.trinity_only) == sorted([
        "explorer.over_rollout.ratio", "explorer.over_rollout.wait_after_min", "explorer.dynamic_timeout.enable",
        "explorer.max_repeat_times_per_runner", "explorer.rollout_model.enforce_eager",
        "trainer.ulysses_sequence_parallel_size", "trainer.use_dynamic_bsz", "trainer.param_offload",
        "buffer.trainer_input.experience_buffer.name", "buffer.trainer_input.experience_buffer.storage_type",
        "buffer.trainer_input.experience_buffer.max_read_timeout"])
    on_trinity = translation(RUNTIME, backbone="trinity")
    assert on_trinity.trinity_only == [] and "explorer.over_rollout.ratio" in on_trinity.passed


def test_semantic_trinity_keys_get_their_meaning_on_debug_or_a_reason():
    """workflow_args reach the workflow, auxiliary models are served, the advantage takes its arguments; a replay
    buffer that reuses experiences (off-policy) is refused with the reason."""
    extra = {"buffer": {"explorer_input": {"taskset": {"workflow_args": {"trainable_target": "good_guy"}}},
                        "train_batch_size": 2048,
                        "trainer_input": {"experience_buffer": {"name": "w", "replay_buffer": {"enable": True}}}},
             "algorithm": {"algorithm_type": "multi_step_grpo",
                           "advantage_fn_args": {"epsilon": 1e-4, "enable_step_norm": True, "step_norm": True}},
             "model": {"temperature": 0.7},
             "explorer": {"auxiliary_models": [{"name": "participant", "model_path": "aux", "temperature": 0.1,
                                                "max_response_tokens": 64, "max_model_len": 1024}]}}
    t = translation(extra, backbone="debug")
    a = t.tree["astuner"]
    assert a["rollout"]["workflow_args"] == {"trainable_target": "good_guy"}
    assert a["auxiliary_models"] == {"participant": {"path": "aux", "temperature": 0.1, "max_tokens": 64,
                                                     "max_model_len": 1024}}
    assert a["trainer_common"]["algorithm"]["adv_epsilon"] == 1e-4 and a["trainer_common"]["algorithm"]["step_norm"]
    assert "never reads it" in t.ignored["algorithm.advantage_fn_args.step_norm"]
    assert set(t.approximated) == {"buffer.train_batch_size", "buffer.trainer_input.experience_buffer.replay_buffer"}
    # every backbone serves them (Trinity on its explorer's engines, verl on engines of its own)
    assert translation(extra, backbone="trinity").tree["astuner"]["auxiliary_models"] == a["auxiliary_models"]
    reuse = deep_merge(extra, {"buffer": {"trainer_input": {"experience_buffer": {
        "replay_buffer": {"reuse_cooldown_time": 5}}}}})
    with pytest.raises(UserError, match=r"buffer.trainer_input.experience_buffer=.*no astuner meaning"):
        translated(reuse, backbone="debug")
    with pytest.raises(UserError, match=r"advantage_fn_args.std_cal_level: 'batch': astuner's advantage takes "
                                        r"epsilon, enable_step_norm only"):
        translated(deep_merge(extra, {"algorithm": {"advantage_fn_args": {"std_cal_level": "batch"}}}), backbone="debug")


def test_std_threshold_drops_on_debug_the_groups_trinity_drops():
    """advantage_fn_args.std_threshold (agentscope-samples' frozen lake sets 0.0001): Trinity's GRPO leaves out a
    group whose rewards' sample std is at most it, and a group of one; on debug the same groups leave the step
    (reward_std_filter, after the file's own operators)."""
    import random

    import torch

    from astuner.config.schema import OperatorConfig
    from astuner.data.operators import apply_operators
    from astuner.schema.sample import Sample

    extra = {"algorithm": {"algorithm_type": "multi_step_grpo", "repeat_times": 4,
                           "advantage_fn_args": {"std_threshold": 0.1}},
             "data_processor": {"experience_pipeline": {"operators": [{"name": "pass_rate_calculator"}]}}}
    ops = translation(extra, backbone="debug").tree["astuner"]["data_processor"]["experience_pipeline"]["operators"]
    assert [op["name"] for op in ops] == ["pass_rate_calculator", "reward_std_filter"]
    rng = random.Random(0)
    groups = {f"t{i}": [rng.choice([0.0, 0.03, 0.09, 0.3, 1.0]) for _ in range(rng.choice([1, 4, 4]))] for i in range(300)}
    trinity_keeps = {t for t, r in groups.items() if len(r) > 1 and float(torch.std(torch.tensor(r))) > 0.1}
    samples = [Sample(task_id=t, episode_uuid=f"{t}-{j}", repeat_index=j, input_ids=[1, 2], prompt_length=1,
                      loss_mask=[1], logprobs=[0.0], reward=r) for t, rewards in groups.items()
               for j, r in enumerate(rewards) if len(rewards) == 4 or j == 0]
    kept, _ = apply_operators([OperatorConfig(**ops[1])], samples, lambda rates: None)
    assert {s.task_id for s in kept} == trinity_keeps and 0 < len(trinity_keeps) < len(groups)
    with pytest.raises(UserError, match=r"advantage_fn_args.std_threshold: must be a number of at least 0"):
        translated(deep_merge(extra, {"algorithm": {"advantage_fn_args": {"std_threshold": "low"}}}), backbone="debug")


def test_an_astuner_section_in_a_trinity_config_sets_astuner_keys_over_the_translation():
    from astuner.compat.trinity.config import is_trinity_config

    conf = deep_merge(MINIMAL, {"astuner": {"rollout": {"compute_madness_checklist": ["nonsense"],
                                                        "multi_turn": {"max_sample_per_task": 2}}}})
    assert is_trinity_config(conf) and not is_trinity_config({"astuner": {}, "trainer": {}})
    a = tc.translate(conf, backbone="debug", source="t.yaml").tree["astuner"]
    assert a["rollout"]["compute_madness_checklist"] == ["nonsense"] and a["rollout"]["num_repeat"]
    assert a["rollout"]["multi_turn"] == {"max_sample_per_task": 2}


@pytest.mark.parametrize("extra,message", [
    ({"algorithm": {"repeat_time": 4}}, "algorithm.repeat_time: not a Trinity-RFT 0.6 config key (did you mean "
                                        "'algorithm.repeat_times'?)"),
    ({"buffer": {"explorer_input": {"taskset": {"pathh": "x"}}}}, "buffer.explorer_input.taskset.pathh: not a "
     "Trinity-RFT 0.6 config key (did you mean 'buffer.explorer_input.taskset.path'?)"),
    ({"algorithm": {"algorithm_type": None}}, "algorithm.algorithm_type: not set (Trinity's default is ppo"),
    ({"algorithm": {"algorithm_type": "ppo"}}, "algorithm.algorithm_type='ppo'"),
    ({"model": {"model_path": ""}}, "model.model_path: not set"),
    ({"model": {"max_model_len": None}}, "model.max_model_len: not set"),
    ({"buffer": {"explorer_input": {"taskset": {"path": None}}}}, "buffer.explorer_input.taskset.path: not set"),
    ({"mode": "explore"}, "mode: 'explore': tune() trains"),
    ({"model": {"lora_configs": [{"path": "/adapters/a"}]}}, "model.lora_configs[0].path: astuner trains a new"),
    ({"model": {"lora_configs": [{}, {}]}}, "model.lora_configs: astuner trains one LoRA adapter"),
    ({"stages": [{"stage_name": "sft"}]}, "stages: astuner runs one stage per tune() call"),
    ({"cluster": {"ray_address": "10.0.0.1:6379"}}, "cluster.ray_address: astuner takes the Ray cluster from "),
    ({"explorer": {"auxiliary_models": [{"model_path": "judge"}]}}, "explorer.auxiliary_models"),
    ({"buffer": {"explorer_input": {"default_workflow_type": "math_workflow"}}},
     "buffer.explorer_input.default_workflow_type: 'math_workflow': tune() trains workflow_func"),
    ({"buffer": {"explorer_input": {"taskset": {"format": {"system_prompt": "Be brief."}}}}},
     "buffer.explorer_input.taskset.format.system_prompt: 'Be brief.': astuner reads tasks with its own reader"),
    ({"buffer": {"explorer_input": {"taskset": {"repeat_times": 2}}}},
     "buffer.explorer_input.taskset.repeat_times: 2: Trinity trains with algorithm.repeat_times (4)"),
    ({"buffer": {"explorer_input": {"eval_tasksets": [{"path": "a"}, {"path": "b"}]}}}, "validates on one taskset"),
    (eval_set(subset_name="socratic"), "eval_tasksets[0].subset_name: astuner reads validation with the training"),
    ({"trainer": {"grad_clip": 0.5}, "algorithm": {"optimizer": {"clip_grad": 0.7}}},
     "trainer.grad_clip: 0.5 differs from algorithm.optimizer.clip_grad 0.7"),
    ({"algorithm": {"policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-sum"}}},
     "policy_loss_fn_args.loss_agg_mode: Trinity replaces it with algorithm.loss_agg_mode (token-mean)"),
    ({"mode": "colocate", "cluster": {"node_num": 1, "gpu_per_node": 4}}, "mode: colocate shares one GPU"),
])
@pytest.mark.parametrize("backbone", ["debug", "trinity"])
def test_what_no_backbone_can_honour_is_refused_on_every_backbone(extra, message, backbone):
    if "'ppo'" in message and backbone == "trinity":
        assert translated(extra, backbone)["trinity"]["algorithm"]["algorithm_type"] == "ppo"  # Trinity's to run
        return
    with pytest.raises(UserError, match=re.escape(message)):
        translated(extra, backbone)


def test_trinity_defaults_and_weight_sync_are_taken_on_debug():
    """A key at Trinity's own default changes nothing; how weights travel (sync_method, sync_style, sync_timeout) is
    the backbone's own business; the schedule (sync_interval, sync_offset) and the retries are astuner keys with
    Trinity's meaning."""
    t = tc.translate(deep_merge(MINIMAL, {
        "trainer": {"param_offload": False, "use_dynamic_bsz": True}, "explorer": {"max_retry_times": 2},
        "synchronizer": {"sync_style": "dynamic_by_explorer", "sync_method": "nccl", "sync_interval": 1,
                         "sync_timeout": 1800},
        "buffer": {"batch_size": 8, "train_batch_size": 32}}), backbone="debug", source="t.yaml")
    assert set(t.accepted) == {"synchronizer.sync_style", "synchronizer.sync_method", "synchronizer.sync_timeout"}
    assert "trinity" not in t.tree and not t.passed
    assert t.tree["astuner"]["trainer_common"]["off_policy"] == {"sync_interval": 1}
    assert t.tree["astuner"]["rollout"]["episode_retries"] == 2
    assert translated({"explorer": {"max_retry_times": 0}}, backbone="verl")["astuner"]["rollout"]["episode_retries"] == 0
    # agentscope-samples' data_augment and learn_to_ask: their schedules run on debug as they mean on Trinity
    for sync in ({"sync_interval": 4}, {"sync_interval": 10}, {"sync_interval": 2, "sync_offset": 1}):
        tree = translated({"synchronizer": sync})
        assert tree["astuner"]["trainer_common"]["off_policy"] == sync
    for extra, key in (({"synchronizer": {"sync_style": "fully_async"}}, "synchronizer.sync_style='fully_async'"),
                       ({"buffer": {"batch_size": 8, "train_batch_size": 4}}, "buffer.train_batch_size=4")):
        with pytest.raises(UserError, match=re.escape(key)):
            translated(extra)


def test_trinitys_step_size_reaches_trinity_only_where_astuner_can_pad_to_it():
    """buffer.train_batch_size: at Trinity's own value (batch_size × repeat_times) it changes nothing; on trinity a
    larger one is Trinity's (each episode its share of it), one below a sample of each episode is refused."""
    assert "trinity" not in translated({"buffer": {"train_batch_size": 4}}, backbone="trinity")
    for size in (8, 64):
        assert translated({"buffer": {"train_batch_size": size}}, backbone="trinity")["trinity"] == {
            "buffer": {"train_batch_size": size}}
    with pytest.raises(UserError, match=re.escape("buffer.train_batch_size: 3 holds less than one sample of each of "
                                                  "an explorer step's episodes (batch_size × repeat_times = 4)")):
        translated({"buffer": {"train_batch_size": 3}}, backbone="trinity")


def test_arguments_replace_the_keys_they_name():
    """tune()'s arguments replace the file's keys as agentscope.tuner's do: the file's algorithm is not even
    read when `algorithm=` is given."""
    from astuner.tuner import TunerModelConfig

    arguments = tc.argument_values(AlgorithmConfig(group_size=3, batch_size=5),
                                   TunerModelConfig("m", 64, max_tokens=8, inference_engine_num=2))
    tree = translated({"algorithm": {"algorithm_type": "dapo"}, "model": {"model_path": None},
                       "explorer": {"runner_per_model": 2, "rollout_model": {"engine_num": 4, "dtype": "float16"}}},
                      supplied={"algorithm", "model"}, arguments=arguments)["astuner"]
    assert "adv_estimator" not in tree["trainer_common"]["algorithm"] and "model" not in tree
    assert tree["rollout"]["max_env_worker"] == 2 * 2 * 3  # runners × the arguments' engines × group size


TRINITY_ONLY = {
    "model": {"custom_chat_template": "{{ messages }}"},
    "algorithm": {"kl_loss_fn": "k2", "kl_loss_fn_args": {"kl_coef": 0.005}, "optimizer": {"lr": 2e-6}},
    "explorer": {"concurrent_mode": "multi-threading", "eval_interval": 4,
                 "rollout_model": {"engine_num": 1, "enforce_eager": True,
                                   "extra_engine_args": {"max_num_seqs": 16, "swap_space": 4}}},
    "synchronizer": {"sync_interval": 2, "sync_style": "dynamic_by_explorer"},
    "trainer": {"param_offload": True, "save_interval": 3,
                "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_epochs": 2, "shuffle": True}}}},
    "buffer": {"batch_size": 4, "explorer_input": {"eval_tasksets": [{"path": "openai/gsm8k", "subset_name": "main",
                                                                      "split": "test"}]}},
}


def test_on_trinity_keys_without_astuner_meaning_reach_trinity_through_the_trinity_subtree(tmp_path):
    from astuner.backbone.trinity.translate import translate_to_trinity
    from astuner.config import load_run_config

    t = tc.translate(deep_merge(MINIMAL, TRINITY_ONLY), backbone="trinity", source="t.yaml")
    assert t.tree["trinity"] == {
        "model": {"custom_chat_template": "{{ messages }}"},
        "algorithm": {"kl_loss_fn": "k2", "kl_loss_fn_args": {"kl_coef": 0.005}},  # k2's coefficient goes with it
        "explorer": {"concurrent_mode": "multi-threading",
                     "rollout_model": {"enforce_eager": True, "extra_engine_args": {"swap_space": 4}}},
        "synchronizer": {"sync_style": "dynamic_by_explorer"},  # its schedule is astuner's: below
        "trainer": {"param_offload": True, "trainer_config": {"actor_rollout_ref": {"actor": {"shuffle": True}}}}}
    assert t.tree["astuner"]["trainer_common"]["off_policy"] == {"sync_interval": 2}
    tree = deep_merge(t.tree, {"astuner": {"rollout": {"agentscope_workflow": "tests.api.test_tune_api->"
                                                                              "run_react_agent"}}})
    staged = tmp_path / "staged.yaml"
    staged.write_text(yaml.safe_dump(tree))
    final = translate_to_trinity(load_run_config(staged), tmp_path / "run")
    # the keys astuner has no meaning for, through astuner's own astuner -> Trinity translation
    assert final["model"]["custom_chat_template"] == "{{ messages }}"
    assert final["algorithm"]["kl_loss_fn"] == "k2" and final["algorithm"]["kl_loss_fn_args"]["kl_coef"] == 0.005
    assert final["explorer"]["concurrent_mode"] == "multi-threading"
    assert final["explorer"]["rollout_model"]["enforce_eager"] is True
    assert final["explorer"]["rollout_model"]["extra_engine_args"] == {"max_num_seqs": 16, "swap_space": 4}
    assert final["synchronizer"]["sync_interval"] == 2 and final["synchronizer"]["sync_style"] == "dynamic_by_explorer"
    assert final["trainer"]["param_offload"] is True
    actor = final["trainer"]["trainer_config"]["actor_rollout_ref"]["actor"]
    assert actor["ppo_epochs"] == 2 and actor["shuffle"] is True
    # and the keys with an astuner meaning come back as the same Trinity keys
    assert final["algorithm"]["algorithm_type"] == "multi_step_grpo" and final["algorithm"]["repeat_times"] == 4
    assert final["algorithm"]["optimizer"]["lr"] == 2e-6 and final["buffer"]["batch_size"] == 4
    assert final["model"]["model_path"] == "Qwen/Qwen3-0.6B" and final["model"]["max_model_len"] == 4096
    assert final["explorer"]["eval_interval"] == 4 and final["trainer"]["save_interval"] == 3
    assert final["buffer"]["explorer_input"]["taskset"]["data_selector"]["selector_type"] == "sequential"
    assert final["buffer"]["explorer_input"]["eval_tasksets"][0]["split"] == "test"


# A Trinity-RFT config as agentscope.tuner's GSM8K ReAct tutorial writes it, shrunk to the tiny model
TUTORIAL = """\
# agentscope.tuner: tune(workflow_func=..., judge_func=..., config_path="config.yaml")
project: AgentScope-GSM8K
name: ReAct-tiny
checkpoint_root_dir: ${oc.env:TRINITY_CHECKPOINT_ROOT_DIR,./checkpoints}
algorithm:
  algorithm_type: multi_step_grpo
  repeat_times: 2
  optimizer:
    lr: 2.0e-6
model:
  model_path: ${oc.env:TRINITY_MODEL_PATH,Qwen/Qwen3-0.6B}
  max_response_tokens: 16
  max_model_len: 4096
  temperature: 1.0
cluster:
  node_num: 1
  gpu_per_node: 8
buffer:
  total_epochs: 1
  total_steps: 2
  batch_size: 2
  train_batch_size: 4
  explorer_input:
    taskset:
      name: gsm8k
      path: DATASET
      split: train
      format:
        response_key: answer
      rollout_args:
        temperature: 1.0
    eval_tasksets:
      - name: gsm8k-eval
        path: DATASET
        split: test
explorer:
  eval_interval: 2
  eval_on_startup: false
  runner_per_model: 2
  max_timeout: 600
  rollout_model:
    engine_num: 2
    tensor_parallel_size: 1
    enable_openai_api: true
    enable_history: true
    enable_auto_tool_choice: true
    tool_call_parser: hermes
synchronizer:
  sync_style: dynamic_by_explorer
  sync_method: nccl
  sync_interval: 1
  sync_timeout: 1800
trainer:
  save_interval: 2
  use_dynamic_bsz: true
  ulysses_sequence_parallel_size: 1
monitor:
  monitor_type: tensorboard
"""


@pytest.fixture
def dataset(gsm8k_subset):
    return gsm8k_subset


def test_a_trinity_tutorial_config_trains_on_debug(dataset, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_model_dir))
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    conf = tmp_path / "config.yaml"
    conf.write_text(TUTORIAL.replace("DATASET", str(dataset)))
    root = tune(workflow_func=run_react_agent, judge_func=judge_function, config_path=str(conf))
    assert root == tmp_path / "checkpoints" / "AgentScope-GSM8K" / "ReAct-tiny"  # its project and name
    assert (root / "global_step_2" / "COMPLETE").exists()
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "val/reward_mean" in rows[1] and "val/reward_mean" not in rows[0]
    saved = yaml.safe_load((root / "config.yaml").read_text())["astuner"]
    assert saved["trainer_common"]["optim"]["lr"] == 2e-6
    assert saved["data"]["train_batch_size"] == 2 and saved["rollout"]["num_repeat"] == 2
    assert saved["trainer_common"]["algorithm"]["adv_estimator"] == "multi_step_grpo"
    assert saved["rollout"]["max_model_len"] == 4096 and saved["rollout"]["max_response_length_in_one_turn"] == 16
    assert saved["rollout"]["max_env_worker"] == 8 and saved["rollout"]["episode_timeout_s"] == 600
    assert saved["task_reader"]["huggingface_dat_repo"]["validation_split"] == "test"
    log = (root / "astuner.log").read_text()
    assert "is a Trinity-RFT config" in log and "synchronizer.sync_style" in log
    assert "buffer.explorer_input.taskset.format.response_key" in log and "judge_func" in log
    assert "trinity" not in yaml.safe_load((root / "config.yaml").read_text())  # no empty trinity: subtree


def test_the_tutorial_config_on_trinity_becomes_a_trinity_config_again(tmp_path, monkeypatch):
    """The same file for backbone "trinity": astuner's translation gives Trinity its keys back (Trinity's own
    load_config reads the result where Trinity is installed)."""
    import importlib.util

    from astuner.backbone.trinity.translate import translate_to_trinity
    from astuner.config import load_run_config

    monkeypatch.setenv("TRINITY_MODEL_PATH", "Qwen/Qwen3-0.6B")
    conf = tmp_path / "config.yaml"
    conf.write_text(TUTORIAL.replace("DATASET", "openai/gsm8k"))
    t = tc.translate(tc.load(conf), backbone="trinity", source=str(conf))
    assert t.passed == ["synchronizer.sync_style", "synchronizer.sync_timeout"]
    staged = tmp_path / "staged.yaml"
    staged.write_text(yaml.safe_dump(deep_merge(t.tree, {"astuner": {"rollout": {
        "agentscope_workflow": "tests.api.test_tune_api->run_react_agent"}}})))
    final = translate_to_trinity(load_run_config(staged), tmp_path / "run")
    assert (final["project"], final["name"]) == ("AgentScope-GSM8K", "ReAct-tiny")
    assert final["algorithm"]["repeat_times"] == 2 and final["algorithm"]["optimizer"]["lr"] == 2e-6
    assert final["buffer"]["batch_size"] == 2 and final["buffer"]["total_steps"] == 2
    assert final["model"]["max_model_len"] == 4096 and final["model"]["max_response_tokens"] == 16
    assert final["explorer"]["max_timeout"] == 600 and final["explorer"]["eval_interval"] == 2
    assert final["synchronizer"]["sync_style"] == "dynamic_by_explorer"
    assert final["synchronizer"]["sync_timeout"] == 1800
    assert final["trainer"]["save_interval"] == 2 and final["monitor"]["monitor_type"] == "tensorboard"
    if importlib.util.find_spec("trinity"):
        from trinity.common.config import load_config

        (tmp_path / "final.yaml").write_text(yaml.safe_dump(final))
        load_config(str(tmp_path / "final.yaml"))


def test_a_value_astuner_refuses_names_the_trinity_key_it_came_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(deep_merge(MINIMAL, {"algorithm": {"loss_agg_mode": "seq-mean-token-sum-norm"}})))
    with pytest.raises(UserError) as info:
        tune(workflow_func=run_react_agent, config_path=str(path))
    message = str(info.value)
    assert "astuner.trainer_common.algorithm.loss_agg_mode 'seq-mean-token-sum-norm' is not valid" in message
    assert "comes from algorithm.loss_agg_mode" in message and "\n" not in message


@pytest.mark.parametrize("extra, message", [
    ({"name": "team/run-1"}, "astuner.experiment_name 'team/run-1' is not a folder name"),  # was a FileNotFoundError
    ({"checkpoint_root_dir": "/proc/astuner-runs"},
     "the run folder (from checkpoint_root_dir) /proc/astuner-runs/p: no run folder can be made in /proc"),
    ({"checkpoint_root_dir": "/sys/astuner-runs"},
     "the run folder (from checkpoint_root_dir) /sys/astuner-runs/p: no run folder can be made in /sys"),
])
def test_a_name_or_root_that_cannot_be_a_run_folder_is_one_line_naming_the_trinity_key(
        dataset, tiny_model_dir, tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    conf = deep_merge(yaml.safe_load(TUTORIAL.replace("DATASET", str(dataset))),
                      {"project": "p", "model": {"model_path": str(tiny_model_dir)}, **extra})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(conf))
    with pytest.raises(UserError) as info:
        tune(workflow_func=run_react_agent, judge_func=judge_function, config_path=str(path))
    text = str(info.value)
    assert message in text and "\n" not in text, text
    key = "name" if "name" in extra else "checkpoint_root_dir"
    assert key in text.replace(message, "") or key in message
    assert not (tmp_path / "checkpoints").exists()


def test_a_trinity_config_with_every_top_level_key_misspelt_is_told_by_those_keys(tmp_path, monkeypatch):
    """It is neither a Trinity config nor an astuner YAML (was: "astuner.model.path is not set; ...")."""
    monkeypatch.chdir(tmp_path)
    conf = yaml.safe_load(TUTORIAL)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"projetc": "p", "nmae": "n", "modle": conf["model"], "bufer": conf["buffer"],
                                    "algoritm": conf["algorithm"]}))
    with pytest.raises(UserError) as info:
        tune(workflow_func=run_react_agent, judge_func=judge_function, config_path="c.yaml")
    text = str(info.value)
    assert "is neither an astuner YAML (an astuner: section) nor a Trinity-RFT config" in text
    assert "algoritm (did you mean algorithm?)" in text and "bufer (did you mean buffer?)" in text
    assert "and 1 more" in text and "not set" not in text and len(text) <= 300


def test_continue_from_checkpoint_false_starts_a_new_run_beside_the_old(dataset, tiny_model_dir, tmp_path,
                                                                       monkeypatch):
    """As Trinity: an existing run folder is continued (continue_from_checkpoint, its default), or with false a
    new one named with a timestamp is started; tune(algorithm=...) replaces the file's algorithm keys."""
    import types

    import astuner.backbone

    monkeypatch.chdir(tmp_path)
    ran = []
    recording = types.SimpleNamespace(name="debug", uses_ray=False, records_tokens=True, check_available=lambda: None,
                                      plan=lambda config: None, notes=lambda config: [], run=ran.append)
    monkeypatch.setattr(astuner.backbone, "load_backbone", lambda name: recording)
    old = tmp_path / "checkpoints" / "p" / "run1"
    old.mkdir(parents=True)
    (old / "config.yaml").write_text("astuner: {}\n")
    conf = deep_merge(MINIMAL, {"project": "p", "name": "run1", "continue_from_checkpoint": False,
                                "algorithm": {"algorithm_type": "dapo"},
                                "model": {"model_path": str(tiny_model_dir)},
                                "buffer": {"explorer_input": {"taskset": {"path": str(dataset),
                                                                          "subset_name": None}}}})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(conf))
    tune(workflow_func=run_react_agent, config_path=str(path), algorithm=AlgorithmConfig(group_size=3))
    assert len(ran) == 1
    new = [p for p in (tmp_path / "checkpoints" / "p").iterdir() if re.fullmatch(r"run1_\d{14}", p.name)]
    assert len(new) == 1 and (old / "config.yaml").read_text() == "astuner: {}\n"
    saved = yaml.safe_load((new[0] / "config.yaml").read_text())["astuner"]
    assert saved["rollout"]["num_repeat"] == 3 and saved["trainer_common"]["algorithm"]["adv_estimator"] == \
        "multi_step_grpo"


def test_the_schema_table_is_trinitys():
    """astuner/compat/trinity/schema.py against Trinity-RFT's own dataclasses, where Trinity is installed (its
    environment)."""
    needs("trinity")
    import dataclasses
    import enum

    from trinity.common import config as trinity

    from astuner.compat.trinity import schema

    def value(obj, dotted):
        for part in dotted.split("."):
            obj = getattr(obj, part)
        return obj.value if isinstance(obj, enum.Enum) else obj

    full = trinity.Config()
    for key, default in schema.CONFIG.items():
        got = value(full, key)
        assert (None if dataclasses.is_dataclass(got) else got) == default, key
    taskset = trinity.TasksetConfig(task_selector=trinity.DataSelectorConfig())  # the older name, when given
    for key, default in schema.TASKSET.items():
        assert value(taskset, key) == default, key
    for key, default in schema.INFERENCE_MODEL.items():
        assert value(trinity.InferenceModelConfig(), key) == default, key
    for key, default in schema.LORA.items():
        assert value(trinity.LoRAConfig(), key) == default, key
    assert {f.name for f in dataclasses.fields(trinity.Config)} == {k.split(".")[0] for k in schema.CONFIG}


@pytest.mark.parametrize("extra,message", [
    ({"model": {"max_model_len": "512"}}, "model.max_model_len: must be an integer >= 1 or null, got '512' (a string)"),
    ({"trainer": {"save_interval": "x"}}, "trainer.save_interval: must be an integer >= 0, got 'x' (a string)"),
    ({"buffer": {"batch_size": 2.5}}, "buffer.batch_size: must be an integer >= 1, got 2.5 (a number)"),
    ({"buffer": {"batch_size": None}}, "buffer.batch_size: must be an integer >= 1, got null"),
    ({"cluster": {"gpu_per_node": "8"}}, "cluster.gpu_per_node: must be an integer >= 0, got '8' (a string)"),
    ({"algorithm": {"optimizer": {"lr_warmup_steps": "5"}}},
     "algorithm.optimizer.lr_warmup_steps: must be an integer, got '5' (a string)"),
    ({"algorithm": {"optimizer": {"clip_grad": [1.0]}}},
     "algorithm.optimizer.clip_grad: must be a finite number >= 0, got [1.0] (a list)"),
    # nan and inf are no setting: nan passes every comparison's negation, inf every lower bound
    ({"algorithm": {"optimizer": {"lr_warmup_steps_ratio": float("nan")}}},
     "algorithm.optimizer.lr_warmup_steps_ratio: must be a finite number >= 0, got nan (a number)"),
    ({"trainer": {"grad_clip": float("inf")}}, "trainer.grad_clip: must be a finite number >= 0, got inf (a number)"),
    ({"algorithm": {"kl_loss_fn": ["k1"]}}, "algorithm.kl_loss_fn: must be a string or null, got ['k1'] (a list)"),
    ({"explorer": {"eval_on_startup": "false"}}, "explorer.eval_on_startup: must be true or false, got 'false'"),
    ({"continue_from_checkpoint": "no"}, "continue_from_checkpoint: must be true or false, got 'no' (a string)"),
    ({"checkpoint_root_dir": 5}, "checkpoint_root_dir: must be a string or null, got 5 (an integer)"),
    ({"trainer": {"trainer_config": ["x"]}}, "trainer.trainer_config: must be a mapping or null, got ['x'] (a list)"),
    ({"data_processor": {"experience_pipeline": {"operators": 3}}},
     "data_processor.experience_pipeline.operators: must be a list or null, got 3 (an integer)"),
    ({"buffer": {"explorer_input": {"taskset": {"rollout_args": {"max_tokens": "256"}}}}},
     "buffer.explorer_input.taskset.rollout_args.max_tokens: must be an integer >= 1 or null, got '256' (a string)"),
    ({"buffer": {"explorer_input": {"taskset": {"data_selector": {"kwargs": "x"}}}}},
     "buffer.explorer_input.taskset.data_selector.kwargs: must be a mapping or null, got 'x' (a string)"),
    (eval_set(rollout_args={"max_tokens": "9"}),
     "buffer.explorer_input.eval_tasksets[0].rollout_args.max_tokens: must be an integer >= 1 or null, got '9'"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_its_key_and_type(extra, message):
    with pytest.raises(UserError) as info:
        translated(extra)
    assert message in str(info.value) and "\n" not in str(info.value)


WRONG = ("x", "12", 0, -1, 2.5, True, None, [1], {"a": 1})


@pytest.mark.parametrize("backbone", ["debug", "trinity"])
def test_no_wrong_value_of_any_trinity_key_crashes_the_translation(backbone):
    """Every Trinity key (and every taskset key, in the training and the eval taskset) set to values of every
    type: translated, or refused with UserError, never a raw exception."""
    from astuner.compat.trinity import schema

    base = deep_merge(MINIMAL, eval_set())
    paths = [p.split(".") for p in schema.defaults()] + [
        ["buffer", "explorer_input", which, *k.split(".")] for which in ("taskset", "eval_tasksets")
        for k in schema.TASKSET] + [["buffer", "explorer_input", k] for k in schema.EXPLORER_INPUT]
    for parts in paths:
        for value in WRONG:
            conf = deep_merge(base, {})
            node = conf
            for part in parts[:-1]:
                node = node.setdefault(part, {}) if isinstance(node, dict) else node
                if part == "eval_tasksets":
                    node = node[0]
            node[parts[-1]] = value
            try:
                tc.translate(conf, backbone=backbone, source="t.yaml")
            except UserError as exc:
                assert "\n" not in str(exc)
            except Exception as exc:  # noqa: BLE001 - the failure names the key and value
                pytest.fail(f"{'.'.join(parts)}={value!r}: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("extra,key", [
    ({"algorithm": {"repeat_times": "four"}}, "algorithm.repeat_times"),
    ({"algorithm": {"repeat_times": 0}}, "algorithm.repeat_times"),
    ({"explorer": {"runner_per_model": "two"}}, "explorer.runner_per_model"),
    ({"explorer": {"rollout_model": {"engine_num": 0}}}, "explorer.rollout_model.engine_num"),
])
def test_the_concurrency_product_names_its_own_wrong_factor(extra, key, tmp_path, monkeypatch):
    """rollout.max_env_worker = runner_per_model × engine_num × repeat_times: a wrong factor is refused as itself
    (it used to be multiplied — 'fourfour' — and blamed on runner_per_model)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(deep_merge(deep_merge(MINIMAL, {"explorer": {"runner_per_model": 2}}), extra)))
    with pytest.raises(UserError) as info:
        tune(workflow_func=run_react_agent, config_path=str(path))
    message = str(info.value)
    assert f"{key}: must be an integer >= 1" in message and "max_env_worker" not in message
    others = {"algorithm.repeat_times", "explorer.runner_per_model", "explorer.rollout_model.engine_num"} - {key}
    assert not any(other in message for other in others), message
    assert not (tmp_path / "checkpoints").exists()


def test_the_concurrency_hint_names_all_three_factors():
    assert tc.source_hint("astuner.rollout.max_env_worker must be >= 1") == (
        "astuner.rollout.max_env_worker comes from explorer.runner_per_model × explorer.rollout_model.engine_num × "
        "algorithm.repeat_times")


OPENAI_KEYS = {"enable_openai_api": True, "enable_history": True, "enable_auto_tool_choice": True,
               "tool_call_parser": "hermes"}


@pytest.mark.parametrize("backbone", ["debug", "trinity"])
def test_an_unset_max_model_len_refuses_it_alone(backbone):
    with pytest.raises(UserError) as info:
        translated({"model": {"max_model_len": None}, "explorer": {"rollout_model": OPENAI_KEYS}}, backbone)
    message = str(info.value)
    assert "model.max_model_len: not set" in message
    assert not any(key in message for key in OPENAI_KEYS), message


@pytest.mark.parametrize("model,message", [
    ({"max_model_len": 512, "max_response_tokens": 1000},
     "model.max_response_tokens: 1000 leaves the prompt no room in model.max_model_len (512)"),
    ({"max_model_len": 512, "max_response_tokens": 512},
     "model.max_response_tokens: 512 leaves the prompt no room in model.max_model_len (512)"),
    ({"max_model_len": 512, "max_prompt_tokens": 600},
     "model.max_prompt_tokens: 600 leaves the response no room in model.max_model_len (512)"),
])
def test_a_length_that_leaves_the_other_no_room_is_refused(model, message):
    """Trinity would cut it to max_model_len - 1, leaving a 1-token prompt (or response): every episode truncated."""
    with pytest.raises(UserError, match=re.escape(message)):
        translated({"model": model})


def test_a_response_limit_below_max_model_len_leaves_the_prompt_the_rest():
    tree = translated({"model": {"max_model_len": 512, "max_response_tokens": 511}})["astuner"]
    assert (tree["data"]["max_prompt_length"], tree["data"]["max_response_length"]) == (1, 511)


def test_the_response_key_of_trinitys_reward_functions_is_taken_and_noted():
    """agentscope.tuner's configs name the answer column for Trinity's reward functions; under tune() the judge
    reads the task row itself, so the key changes nothing (noted in the log), on every backbone."""
    fmt = {"format": {"prompt_key": "question", "response_key": "answer"}}
    for backbone in ("debug", "trinity"):
        t = tc.translate(deep_merge(deep_merge(MINIMAL, {"buffer": {"explorer_input": {"taskset": fmt}}}),
                                    eval_set(**fmt)), backbone=backbone, source="t.yaml")
        assert "trinity" not in t.tree and set(t.ignored) == {
            "buffer.explorer_input.taskset.format.response_key",
            "buffer.explorer_input.eval_tasksets[0].format.response_key"}
        assert "judge_func" in t.ignored["buffer.explorer_input.taskset.format.response_key"]


@pytest.mark.parametrize("extra,message", [
    ({"algoritm": {"repeat_times": 4}}, "algoritm: not a Trinity-RFT 0.6 config key (did you mean 'algorithm'?)"),
    ({"modle": {"max_model_len": 4096}}, "modle: not a Trinity-RFT 0.6 config key (did you mean 'model'?)"),
    ({"monitor": {"monitor_type": "tensorbord"}}, "monitor.monitor_type: 'tensorbord' is not one of tensorboard, "
                                                  "wandb, swanlab, mlflow (did you mean 'tensorboard'?)"),
])
@pytest.mark.parametrize("backbone", ["debug", "trinity"])
def test_a_misspelt_section_or_monitor_gets_the_right_one(extra, message, backbone):
    with pytest.raises(UserError, match=re.escape(message)):
        translated(extra, backbone)


def test_the_reverse_table_names_declared_keys():
    """Every astuner key the Trinity-RFT table translates into is declared in config/schema.py (a renamed key
    fails here, not in a user's run)."""
    from astuner.config.keys import declared
    from astuner.config.schema import AstunerConfig

    keys = {item.path for item in declared(AstunerConfig)}
    targets = {f"astuner.{target}" for target in tc.KEYS.values() if isinstance(target, str)}
    targets |= {f"astuner.{target}" for target in tc.PRODUCTS}
    assert len(targets) > 30
    undeclared = {t for t in targets if t not in keys and t.rsplit(".", 1)[0] not in keys}
    assert not undeclared, undeclared


def trinity_run(tmp_path, extra: dict, astuner: dict):
    """A Trinity file through tune()'s route on backbone trinity (tune()'s defaults under it), as the run loads it."""
    from astuner.api import tune_rewrites
    from astuner.config import load_run_config

    t = tc.translate(deep_merge(MINIMAL, extra), backbone="trinity", source="t.yaml")
    tree = deep_merge(deep_merge({"astuner": tune_rewrites(None, None)}, t.tree), {"astuner": {
        "rollout": {"agentscope_workflow": "tests.api.test_tune_api->run_react_agent"}, **astuner}})
    staged = tmp_path / "staged.yaml"
    staged.write_text(yaml.safe_dump(tree))
    return load_run_config(staged)


@pytest.mark.parametrize("per_step, device, kept", [(None, "cuda", 4), (2048, "cuda", 256), (2048, "cpu", 4)])
def test_tunes_every_sample_default_on_trinity_keeps_each_episodes_share_of_the_step(tmp_path, per_step, device, kept):
    """tune()'s max_samples_per_episode=None (every sample) on Trinity used to raise a TypeError (None × the step's
    episodes). A Trinity trainer step takes a fixed count of experiences, so each episode keeps its share of the step
    the file sizes (buffer.train_batch_size over the step's 2 × 4 episodes), else 4; the workflow is told its bound,
    and one WARNING line says it. The CPU mode pads each step to 4 samples an episode, said in one line: without
    padding removal each padding row of werewolves' 2048 cost a whole sequence, and Ray's workers ran out of memory."""
    from astuner.backbone.trinity.backbone import BACKBONE
    from astuner.backbone.trinity.translate import translate_to_trinity
    from astuner.config.notes import WarningNote

    buffer = {"batch_size": 2, **({"train_batch_size": per_step} if per_step else {})}
    run = trinity_run(tmp_path, {"buffer": buffer}, {"trainer_common": {"device": device, "n_gpus_per_node": 8}})
    assert run.astuner.rollout.multi_turn.max_sample_per_task is None
    final = translate_to_trinity(run, tmp_path / "run")
    assert final["buffer"]["train_batch_size"] == 8 * kept
    assert final["buffer"]["explorer_input"]["taskset"]["workflow_args"]["max_samples"] == kept
    notes = BACKBONE.notes(run)
    assert isinstance(notes[0], WarningNote) and f"so an episode keeps at most {kept} samples there" in notes[0]
    adapted = ["trinity.buffer.train_batch_size 2048 runs as 32 in the CPU mode"] if device == "cpu" and per_step else []
    assert [note.split(":")[0] for note in notes[1:]] == adapted


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_gpu_files_sequence_parallelism_runs_as_one_process_in_the_cpu_mode(tmp_path, device):
    """werewolves' config sets ulysses_sequence_parallel_size 2 (written for 32 GPUs): in the CPU mode Trinity's
    trainer died inside Ray after the run folder existed. Adapted there with one line each; on GPUs as given."""
    from astuner.backbone.trinity.backbone import BACKBONE
    from astuner.backbone.trinity.translate import translate_to_trinity

    extra = {"trainer": {"ulysses_sequence_parallel_size": 2}}
    run = trinity_run(tmp_path, extra, {"trainer_common": {"device": device, "n_gpus_per_node": 8}})
    final = translate_to_trinity(run, tmp_path / "run")
    adapted = [note for note in BACKBONE.notes(run) if "in the CPU mode" in note]
    if device == "cpu":
        assert final["trainer"]["ulysses_sequence_parallel_size"] == 1
        assert final["trainer"]["use_remove_padding"] is False
        assert final["synchronizer"]["sync_method"] == "checkpoint"
        assert [note.split(" runs as")[0] for note in adapted] == ["trinity.trainer.ulysses_sequence_parallel_size 2"]
    else:
        assert final["trainer"]["ulysses_sequence_parallel_size"] == 2
        assert adapted == []


def test_a_files_group_filter_runs_before_the_padding_on_trinity(tmp_path):
    """frozen_lake's config sets advantage_fn_args.std_threshold: handed to Trinity's advantage fn, which runs after
    our operators, it also dropped the padding's group and left every step short; Trinity's trainer then waited
    30 minutes for rows that never came. It runs as our reward_std_filter (the same groups: population std at most
    t·sqrt((n-1)/n) for n episodes a task), before the padding, and Trinity's filter is off."""
    from astuner.backbone.trinity.translate import translate_to_trinity

    run = trinity_run(tmp_path, {"algorithm": {"advantage_fn_args": {"std_threshold": 1e-4}}}, {})
    final = translate_to_trinity(run, tmp_path / "run")
    assert final["algorithm"]["advantage_fn_args"]["std_threshold"] is None
    names = [op["name"].rsplit(".", 1)[-1] for op in final["data_processor"]["experience_pipeline"]["operators"]]
    assert names[-2:] == ["EpisodeRewardSTDFilter", "StepPadding"], names
    threshold = final["data_processor"]["experience_pipeline"]["operators"][-2]["args"]["threshold"]
    assert abs(threshold - 1e-4 * (3 / 4) ** 0.5) < 1e-12  # repeat_times 4
