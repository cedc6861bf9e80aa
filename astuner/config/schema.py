"""Typed schema of the `astuner:` config tree.

Defaults live in `default_config/astuner_default.yaml` (documented there, key by key); the dataclass
defaults below must equal them (a test checks), so code that builds a config without YAML gets the same
values. Later features add their keys here and in the YAML together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class HuggingfaceDatRepoConfig:
    dataset_path: Optional[str] = None
    dataset_name: Optional[str] = None
    training_split: str = "train"
    validation_split: Optional[str] = "test"
    validation_dataset_path: Optional[str] = None


@dataclass
class DatasetFileSplitConfig:
    file_path: Optional[str] = None


@dataclass
class DatasetFileConfig:
    training: DatasetFileSplitConfig = field(default_factory=DatasetFileSplitConfig)
    validation: DatasetFileSplitConfig = field(default_factory=DatasetFileSplitConfig)


@dataclass
class EnvServiceConfig:
    env_url: Optional[str] = None
    env_type: Optional[str] = None
    training_split: str = "train"
    validation_split: Optional[str] = "val"
    timeout_s: float = 30.0
    retries: int = 3
    retry_backoff_s: float = 0.5


@dataclass
class TaskSelectorConfig:
    selector_type: str = "shuffle"
    seed: int = 42
    feature_keys: list[str] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskReaderConfig:
    type: str = "huggingface_dat_repo"
    query_field: str = "question"
    task_selector: TaskSelectorConfig = field(default_factory=TaskSelectorConfig)
    data_selector: Optional[TaskSelectorConfig] = None
    huggingface_dat_repo: HuggingfaceDatRepoConfig = field(default_factory=HuggingfaceDatRepoConfig)
    dataset_file: DatasetFileConfig = field(default_factory=DatasetFileConfig)
    env_service: EnvServiceConfig = field(default_factory=EnvServiceConfig)


@dataclass
class DataConfig:
    train_batch_size: int = 32
    max_prompt_length: int = 3000
    max_response_length: int = 10000


@dataclass
class TinyModelConfig:
    seed: int = 0
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    tokenizer: str = "bpe"


@dataclass
class LoraConfig:
    rank: int = 8
    alpha: float = 16.0
    # "all-linear" (every linear layer but the output head) or a list of module names (q_proj, v_proj, ...)
    target_modules: Any = "all-linear"
    dropout: float = 0.0


@dataclass
class ModelConfig:
    path: Optional[str] = None
    tiny: Optional[TinyModelConfig] = None
    lora: Optional[LoraConfig] = None


@dataclass
class MultiTurnConfig:
    max_sample_per_task: int = 4


@dataclass
class ValKwargsConfig:
    temperature: float = 0.0
    top_p: float = 1.0
    num_repeat: int = 1


@dataclass
class RolloutConfig:
    agentscope_workflow: Optional[str] = None
    temperature: float = 0.9
    top_p: float = 1.0
    max_env_worker: int = 64
    num_repeat: int = 4
    agent_madness_reward: float = -1.0
    compute_madness_checklist: list[str] = field(default_factory=lambda: ["nonsense"])
    tensor_model_parallel_size: int = 1
    max_num_seqs: int = 64
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    max_response_length_in_one_turn: int = 4096
    max_model_len: int = 13000
    engine: str = "auto"
    openai_base_url: Optional[str] = None
    openai_model: Optional[str] = None
    gpu_memory_utilization: float = 0.85
    batch_wait_ms: float = 0.0
    seed: int = 42
    episode_timeout_s: Optional[float] = 900.0
    failure_reward: Optional[float] = None
    max_error_rate: float = 0.5
    run_workflow_in_thread: bool = False
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    tool_call_parser: str = "auto"
    reasoning_parser: str = "auto"
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)


@dataclass
class LlmJudgeConfig:
    base_url: Optional[str] = None
    model: Optional[str] = None
    api_key_env: Optional[str] = None
    timeout_s: float = 60.0


@dataclass
class TaskJudgeConfig:
    judge_protocol: Optional[str] = None
    llm_judge: LlmJudgeConfig = field(default_factory=LlmJudgeConfig)


@dataclass
class SftConfig:
    expert: Optional[str] = None
    steps: int = 0
    lr: float = 3.0e-3
    batch_size: int = 16
    demonstrations_per_task: int = 1
    min_reward: float = 1.0


@dataclass
class OptimConfig:
    lr: float = 1e-6
    warmup_steps: int = 0
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: Optional[float] = 1.0


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "grpo"
    norm_adv_by_std_in_grpo: bool = True
    drop_zero_variance_groups: bool = True
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0


@dataclass
class TrainerCommonConfig:
    save_freq: int = 20
    test_freq: int = 20
    total_epochs: int = 1
    trinity_only__n_vllm_engine: int = 1
    nnodes: int = 1
    n_gpus_per_node: Any = "auto"  # a positive integer or "auto" (validate.py)
    total_training_steps: Optional[int] = None
    val_before_train: bool = False
    seed: int = 42
    device: str = "auto"
    dtype: str = "auto"
    ppo_epochs: int = 1
    mini_batch_num: int = 1
    max_token_len_per_micro_batch: int = 16384
    trajectories_per_step: int = 64
    logger: list[str] = field(default_factory=lambda: ["console", "tensorboard"])
    max_checkpoints_to_keep: Optional[int] = None
    optim: OptimConfig = field(default_factory=OptimConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    sft: SftConfig = field(default_factory=SftConfig)


@dataclass
class OperatorConfig:
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExperiencePipelineConfig:
    operators: list[OperatorConfig] = field(default_factory=list)


@dataclass
class DataProcessorConfig:
    experience_pipeline: ExperiencePipelineConfig = field(default_factory=ExperiencePipelineConfig)


@dataclass
class AstunerConfig:
    project_name: str = "astuner_project"
    experiment_name: Optional[str] = None
    task_reader: TaskReaderConfig = field(default_factory=TaskReaderConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    task_judge: TaskJudgeConfig = field(default_factory=TaskJudgeConfig)
    trainer_common: TrainerCommonConfig = field(default_factory=TrainerCommonConfig)
    data_processor: DataProcessorConfig = field(default_factory=DataProcessorConfig)


TASK_READER_TYPES = ("huggingface_dat_repo", "dataset_file", "env_service")
MADNESS_CHECKS = ("nonsense", "wrong_toolcall")
ENGINES = ("auto", "hf", "vllm", "openai")
SELECTORS = ("sequential", "shuffle", "random", "offline_easy2hard", "difficulty_based")
OPERATORS = ("pass_rate_calculator", "reward_std_filter", "reward_filter")
TINY_TOKENIZERS = ("bpe", "words")
DEVICES = ("auto", "cpu", "cuda")
