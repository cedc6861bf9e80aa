"""Trinity-RFT 0.6.0's config schema as data: every key of `trinity.common.config.Config` with its default
(read from trinity/common/config.py; Trinity itself is not imported). `astuner.compat.trinity.config` uses it to
tell Trinity keys from typos and a key left at Trinity's default from one that asks for something.

Dotted paths; a value of a few sub-trees is taken whole (UNITS: lists of models or stages, pipelines,
buffers, verl's trainer_config). The tasksets (`buffer.explorer_input.taskset`, `tasksets[i]`,
`eval_tasksets[i]`) share TASKSET; `explorer.rollout_model` is INFERENCE_MODEL. A test checks this table
against Trinity's dataclasses where Trinity is installed.
"""

TASKSET = {
    'name': '', 'storage_type': 'file', 'path': None, 'default_workflow_type': None, 'default_reward_fn_type': None,
    'rollout_args.temperature': None, 'rollout_args.top_p': None, 'rollout_args.top_k': -1,
    'rollout_args.logprobs': None, 'rollout_args.max_tokens': None, 'rollout_args.n': 1, 'workflow_args': {},
    'reward_fn_args': {}, 'task_selector.selector_type': 'sequential', 'task_selector.seed': 42,
    'task_selector.feature_keys': [], 'task_selector.kwargs': {}, 'data_selector.selector_type': 'sequential',
    'data_selector.seed': 42, 'data_selector.feature_keys': [], 'data_selector.kwargs': {}, 'split': 'train',
    'subset_name': None, 'format.prompt_type': 'messages', 'format.prompt_key': 'prompt',
    'format.response_key': 'response', 'format.system_prompt_key': None, 'format.system_prompt': None,
    'format.messages_key': 'message', 'format.tools_key': 'tools', 'format.image_key': None, 'format.video_key': None,
    'format.reply_prefix': None, 'format.workflow_key': '', 'format.reward_fn_key': '', 'format.chosen_key': 'chosen',
    'format.rejected_key': 'rejected', 'format.enable_concatenated_multi_turn': False, 'format.chat_template': None,
    'format.enable_thinking': None, 'max_retry_times': 3, 'max_retry_interval': 1, 'enable_progress_bar': False,
    'repeat_times': 1, 'index': 0, 'is_eval': False, 'batch_size': 0, 'total_epochs': 1, 'total_steps': None,
    'ray_namespace': None,
}
INFERENCE_MODEL = {
    'model_path': None, 'name': None, 'trust_remote_code': False, 'engine_type': 'vllm', 'engine_num': 1,
    'tensor_parallel_size': 1, 'data_parallel_size': 1, 'pipeline_parallel_size': 1, 'enable_expert_parallel': False,
    'gpu_per_engine': 0, 'extra_engine_args': {}, 'use_v1': True, 'enforce_eager': False,
    'enable_prefix_caching': True, 'enable_chunked_prefill': True, 'gpu_memory_utilization': 0.9, 'dtype': 'bfloat16',
    'seed': 42, 'temperature': None, 'top_p': None, 'top_k': None, 'logprobs': None, 'max_model_len': None,
    'max_prompt_tokens': None, 'max_response_tokens': None, 'min_response_tokens': None,
    'enable_prompt_truncation': None, 'repetition_penalty': None, 'ignore_eos': False, 'enable_multimodal': False,
    'chat_template': None, 'enable_thinking': None, 'enable_history': False, 'enable_openai_api': False,
    'enable_log_requests': False, 'base_port': None, 'api_key': 'EMPTY', 'enable_auto_tool_choice': False,
    'tool_call_parser': None, 'reasoning_parser': None, 'external_model_config.enable': False,
    'external_model_config.base_url_env': 'OPENAI_BASE_URL', 'external_model_config.api_key_env': 'OPENAI_API_KEY',
    'external_model_config.model_name': None, 'nnodes': 1, 'node_rank': 0, 'enable_return_routed_experts': False,
    'weight_sync_buffer_size': 1024, 'bundle_indices': '', 'engine_id': 0, 'ray_namespace': None,
    'ray_actor_name': None, 'sync_method': None, 'checkpoint_job_dir': None, 'cuda_visible_devices': None,
    'enable_lora': False, 'enable_runtime_lora_updating': False, 'lora_modules': None, 'lora_kwargs': {},
    'rope_scaling': None, 'rope_theta': None,
}
CONFIG = {
    'mode': 'both', 'project': 'Trinity-RFT', 'group': '', 'name': 'rft', 'checkpoint_root_dir': '',
    'checkpoint_job_dir': '', 'ray_namespace': '', 'continue_from_checkpoint': True,
    'ignore_validator_suggestions': False, 'algorithm.algorithm_type': 'ppo', 'algorithm.repeat_times': 1,
    'algorithm.optimizer.lr': 1e-06, 'algorithm.optimizer.lr_warmup_steps': -1,
    'algorithm.optimizer.lr_warmup_steps_ratio': 0.0, 'algorithm.optimizer.min_lr_ratio': 0.01,
    'algorithm.optimizer.warmup_style': None, 'algorithm.optimizer.lr_scheduler_type': 'constant',
    'algorithm.optimizer.optimizer_type': 'adam', 'algorithm.optimizer.betas': [0.9, 0.999],
    'algorithm.optimizer.weight_decay': 0.01, 'algorithm.optimizer.clip_grad': 1.0, 'algorithm.sample_strategy': None,
    'algorithm.sample_strategy_args': None, 'algorithm.advantage_fn': None, 'algorithm.advantage_fn_args': None,
    'algorithm.kl_penalty_fn': None, 'algorithm.kl_penalty_fn_args': None, 'algorithm.policy_loss_fn': None,
    'algorithm.policy_loss_fn_args': None, 'algorithm.kl_loss_fn': None, 'algorithm.kl_loss_fn_args': None,
    'algorithm.entropy_loss_fn': None, 'algorithm.entropy_loss_fn_args': None, 'algorithm.loss_agg_mode': None,
    'algorithm.enable_router_replay': False, 'algorithm.bypass_old_logprobs': True,
    'algorithm.rollout_correction': None, 'data_processor.task_pipeline': None,
    'data_processor.experience_pipeline.operators': [], 'data_processor.experience_pipeline.save_input': True,
    'data_processor.experience_pipeline.input_save_path': None, 'data_processor.experience_pipeline.inputs': {},
    'data_processor.experience_pipeline.output': None, 'model.model_path': '', 'model.trust_remote_code': False,
    'model.critic_model_path': '', 'model.custom_chat_template': None, 'model.chat_template_path': None,
    'model.temperature': 1.0, 'model.top_p': 1.0, 'model.top_k': -1, 'model.logprobs': 0, 'model.max_model_len': None,
    'model.max_prompt_tokens': None, 'model.max_response_tokens': None, 'model.min_response_tokens': 0,
    'model.enable_prompt_truncation': True, 'model.repetition_penalty': 1.0, 'model.enable_thinking': None,
    'model.lora_configs': None, 'model.fully_sharded_loras': False, 'model.max_cpu_loras': None,
    'model.rope_scaling': None, 'model.rope_theta': None, 'model.tinker.enable': False, 'model.tinker.rank': 16,
    'model.tinker.seed': None, 'model.tinker.train_mlp': True, 'model.tinker.train_attn': True,
    'model.tinker.train_unembed': True, 'model.tinker.base_url': None, 'model.external_model.enable': False,
    'model.external_model.base_url_env': 'OPENAI_BASE_URL', 'model.external_model.api_key_env': 'OPENAI_API_KEY',
    'model.external_model.model_name': None, 'cluster.ray_address': 'auto', 'cluster.node_num': 0,
    'cluster.gpu_per_node': 0, 'cluster.total_gpu_num': 0, 'cluster.rollout_gpu_num': 0,
    'cluster.auxiliary_model_gpu_num': 0, 'cluster.explorer_gpu_num': 0, 'cluster.trainer_gpu_num': 0,
    'cluster.trainer_node_num': 0, 'cluster.trainer_gpu_num_per_node': 0, 'buffer.batch_size': 1,
    'buffer.train_batch_size': 0, 'buffer.total_epochs': 1, 'buffer.total_steps': None,
    'buffer.trainer_input.experience_buffer': None,
    'buffer.trainer_input.auxiliary_buffers': {}, 'buffer.explorer_output': None,
    'buffer.tokenizer_path': None, 'buffer.cache_dir': None, 'explorer.name': 'explorer',
    'explorer.runner_per_model': 8, 'explorer.runner_prepare_concurrency': 8,
    'explorer.runner_prepare_max_retries': 2, 'explorer.max_timeout': 1800, 'explorer.max_retry_times': 2,
    'explorer.env_vars': {}, 'explorer.concurrent_mode': 'sequential', 'explorer.max_repeat_times_per_runner': None,
    'explorer.runner_num': None, 'explorer.auxiliary_models': [], 'explorer.eval_interval': 100,
    'explorer.eval_on_startup': True, 'explorer.bench_on_latest_checkpoint': False, 'explorer.proxy_port': 8010,
    'explorer.listen_address': '0.0.0.0', 'explorer.service_status_check_interval': 60,
    'explorer.min_running_model_num': 1, 'explorer.db_url': None, 'explorer.over_rollout.ratio': 0.0,
    'explorer.over_rollout.wait_after_min': 30.0, 'explorer.over_rollout.return_partial_tasks': False,
    'explorer.dynamic_timeout.enable': False, 'explorer.dynamic_timeout.warmup_min_steps': 1,
    'explorer.dynamic_timeout.ratio': 3.0, 'explorer.runner_state_report_interval': 0,
    'explorer.max_inflight_batches': 2, 'trainer.name': 'trainer', 'trainer.trainer_type': 'verl',
    'trainer.trainer_strategy': 'fsdp2', 'trainer.save_interval': 0, 'trainer.enable_preview': False,
    'trainer.total_steps': None, 'trainer.save_hf_checkpoint': 'last', 'trainer.grad_clip': 1.0,
    'trainer.use_dynamic_bsz': True, 'trainer.use_remove_padding': True, 'trainer.balance_batch': True,
    'trainer.critic_warmup': 0, 'trainer.max_token_len_per_gpu': None, 'trainer.ulysses_sequence_parallel_size': 1,
    'trainer.fix_actor_microbatch_loss_scale': False, 'trainer.param_offload': False,
    'trainer.optimizer_offload': False, 'trainer.grad_offload': False, 'trainer.offload_policy': False,
    'trainer.save_strategy': 'unrestricted', 'trainer.max_checkpoints_to_keep': 0,
    'trainer.megatron.tensor_model_parallel_size': 1, 'trainer.megatron.pipeline_model_parallel_size': 1,
    'trainer.megatron.virtual_pipeline_model_parallel_size': None, 'trainer.megatron.expert_model_parallel_size': 1,
    'trainer.megatron.expert_tensor_parallel_size': None, 'trainer.megatron.context_parallel_size': 1,
    'trainer.megatron.sequence_parallel': True, 'trainer.trust_remote_code': False, 'trainer.trainer_config': {},
    'trainer.trainer_config_path': '', 'monitor.monitor_type': 'tensorboard', 'monitor.monitor_args': None,
    'monitor.detailed_stats': False, 'monitor.enable_ray_timeline': False, 'monitor.cache_dir': '',
    'synchronizer.sync_method': 'nccl', 'synchronizer.sync_style': 'fixed', 'synchronizer.sync_interval': 1,
    'synchronizer.explorer_sync_interval': None, 'synchronizer.trainer_sync_interval': None,
    'synchronizer.sync_offset': 0, 'synchronizer.sync_timeout': 3600,
    'synchronizer.group_name': 'rollout_weight_sync', 'synchronizer.wait_for_checkpoint': False,
    'synchronizer.explorer_world_size': None, 'synchronizer.ray_namespace': '', 'service.data_juicer': None,
    'log.level': 'INFO', 'log.group_by_node': False, 'log.save_dir': '', 'stages': [],
}

# model.lora_configs: a list of these (Trinity takes one)
LORA = {'name': None, 'path': None, 'base_model_name': None, 'lora_rank': 32, 'lora_alpha': 32, 'lora_dtype': 'auto',
        'target_modules': 'all-linear', 'exclude_modules': None, 'is_dummy': False}
# buffer.explorer_input: its tasksets are TASKSET each
EXPLORER_INPUT = {'taskset': None, 'tasksets': [], 'eval_tasksets': [], 'default_workflow_type': None,
                  'default_eval_workflow_type': None, 'default_reward_fn_type': None}
# arguments of the loss functions astuner's algorithms use (their default_args(), or the constructor's
# defaults): PPOPolicyLossFn, KLFn, DefaultEntropyLossFn
FN_ARGS = {
    'algorithm.policy_loss_fn_args': {'clip_range': 0.2, 'clip_range_low': None, 'clip_range_high': None,
                                      'clip_ratio_c': 3.0, 'loss_agg_mode': 'token-mean',
                                      'enable_sequence_masking': False, 'delta_sequence_masking': 0.1,
                                      'fallback_to_policy_gradient': False},
    'algorithm.kl_loss_fn_args': {'kl_coef': 0.001, 'adaptive': False, 'target_kl': None, 'horizon': None},
    'algorithm.entropy_loss_fn_args': {'entropy_coef': 0.0},
}
# Trinity-RFT 0.6's advantage functions' defaults (StepWiseGRPOAdvantageFn, GRPOGroupedAdvantage)
ADVANTAGE_DEFAULTS = {'epsilon': 1e-6, 'enable_step_norm': False}
# sub-trees taken as one value (compared whole with their default)
UNITS = {'data_processor.task_pipeline', 'data_processor.experience_pipeline.operators',
         'data_processor.experience_pipeline.inputs', 'data_processor.experience_pipeline.output',
         'model.lora_configs', 'model.rope_scaling', 'buffer.trainer_input.experience_buffer',
         'buffer.trainer_input.auxiliary_buffers', 'buffer.explorer_output', 'explorer.env_vars',
         'explorer.auxiliary_models', 'trainer.trainer_config', 'monitor.monitor_args', 'service.data_juicer',
         'stages', 'algorithm.sample_strategy_args', 'algorithm.advantage_fn_args', 'algorithm.kl_penalty_fn_args',
         'algorithm.rollout_correction'}
INFERENCE_UNITS = {'extra_engine_args', 'lora_modules', 'lora_kwargs', 'rope_scaling'}
TASKSET_UNITS = {'workflow_args', 'reward_fn_args', 'task_selector.kwargs', 'data_selector.kwargs'}


def defaults() -> dict:
    """Every key outside the tasksets, dotted, with Trinity's default."""
    out = dict(CONFIG)
    out.update({f"explorer.rollout_model.{k}": v for k, v in INFERENCE_MODEL.items()})
    return out
