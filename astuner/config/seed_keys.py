"""The seed system's YAML template, key by key: what astuner does with each key of ASTuner's `astune_default.yaml`
(the system astuner reimplements, before its rename to AgentJet; `ajet:` files renamed back to `astuner:`), and the
AgentJet names that are one alias. A file written for it loads as written: each key is either the same astuner key,
converted to its astuner meaning, or taken with one line saying it has no effect and why. The defaults name of that
era, `astune_default`, is astuner's `astuner_default`. docs/migration.md's table is generated from `TABLE`
(`python -m astuner.config.seed_keys`; a test keeps it equal).

`translate(merged)` runs on the composed config before validation: only a user's file can hold these keys (astuner's
defaults do not), so nothing is translated in a file written for astuner.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from astuner.config.keys import set_path
from astuner.config.notes import WarningNote
from astuner.errors import ConfigError

OFF_POLICY = "astuner.trainer_common.off_policy"

DEFAULTS_NAMES = {"astune_default": "astuner_default"}
SAME, CONVERTED, NO_EFFECT = "same", "converted", "no effect"


@dataclass(frozen=True)
class SeedKey:
    key: str  # under astuner:, as the template names it (a section: every key under it)
    does: str  # SAME | CONVERTED | NO_EFFECT
    how: str  # the astuner key or meaning (converted), or why it has no effect
    convert: Optional[Callable[[Any, dict], Any]] = None  # (value, merged): sets the astuner keys
    keep: bool = False  # the key is astuner's too, its value converted in place (convert says whether it changed)


def _same(key: str) -> SeedKey:
    """A key of the template that astuner has with the same meaning."""
    return SeedKey(key, SAME, key)


class _Contradicts(Exception):
    """A seed key's value converted onto a key the file sets otherwise."""

    def __init__(self, dotted: str, there: Any):
        super().__init__(dotted)
        self.dotted, self.there = dotted, there


_UNSET = object()


def _default(dotted: str) -> Any:
    """astuner's default of an `astuner.` key (what the composed config holds when the file does not set it)."""
    from astuner.config.schema import AstunerConfig

    node: Any = AstunerConfig()
    for part in dotted.split(".")[1:]:
        node = getattr(node, part, _UNSET)
    return node


def _to(dotted: str) -> Callable[[Any, dict], None]:
    def convert(value: Any, merged: dict) -> None:
        found, there = _take(merged, dotted, remove=False)
        if (found and dotted.startswith("astuner.") and not isinstance(there, dict) and there not in (None, value)
                and there != _default(dotted)):  # the file sets the astuner key too, to something else
            raise _Contradicts(dotted, there)
        set_path(merged, dotted, value)
    return convert


def _leaves_into(dotted: str) -> Callable[[Any, dict], None]:
    """Each key of the value under `dotted`, over what is there already (a user's own verl keys)."""
    def convert(value: Any, merged: dict) -> None:
        for key, leaf in (value.items() if isinstance(value, dict) else ()):
            set_path(merged, f"{dotted}.{key}", leaf)
    return convert


def _logger(value: Any, merged: dict) -> bool:
    if isinstance(value, str):  # the template's `logger: swanlab`: the console line and that tracker
        loggers = ["console"] if value in ("console", "") else ["console", value]
        set_path(merged, "astuner.trainer_common.logger", loggers)
    return isinstance(value, str)


def _do_sample(value: Any, merged: dict) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"astuner.rollout.val_kwargs.do_sample must be true or false, got {value!r}")
    if value is False:  # greedy validation
        set_path(merged, "astuner.rollout.val_kwargs.temperature", 0.0)


def _judge_type(value: Any, merged: dict) -> None:
    if value not in (None, "customized_protocol"):
        raise ConfigError(f"astuner.task_judge.judge_type: {value!r} has no astuner equivalent (astuner has no rubrics "
                          f"auto-grader); write a judge for task_judge.judge_protocol, or ask an LLM with "
                          f"task_judge.llm_judge")


def _task_reader_type(value: Any, merged: dict) -> bool:
    if value == "jsonl_dataset_file":
        set_path(merged, "astuner.task_reader.type", "dataset_file")
    return value == "jsonl_dataset_file"


def _experiment_name(value: Any, merged: dict) -> bool:
    if value == "read_yaml_name":  # the template's "the file's name"
        set_path(merged, "astuner.experiment_name", None)
    return value == "read_yaml_name"


def _kl_in_reward(value: Any, merged: dict) -> None:
    if value:
        set_path(merged, "algorithm.use_kl_in_reward", True)


AS_WRITTEN = "astuner_seed_keys"  # the run config's section of the seed keys taken out, by dotted key
VERL_ONLY = "verl's own key (read by the verl backbone; no effect on debug and trinity)"
TABLE = (
    _same("project_name"),
    SeedKey("experiment_name", CONVERTED, "experiment_name; read_yaml_name = null (the file's name)",
            _experiment_name, keep=True),
    SeedKey("experiment_dir", NO_EFFECT, "the run folder is {--exp-dir}/{experiment_name}: give --exp-dir"),
    SeedKey("backbone", NO_EFFECT, "the backbone is the command's --backbone (debug when not given)"),
    _same("model.path"),
    _same("data.max_prompt_length"),
    _same("data.max_response_length"),
    _same("data.train_batch_size"),
    _same("rollout.agentscope_workflow"),
    SeedKey("rollout.user_workflow", CONVERTED, "rollout.agentscope_workflow (AgentJet's name)",
            _to("astuner.rollout.agentscope_workflow")),
    SeedKey("rollout.agentscope_disable_toolcalls", NO_EFFECT,
            "tool calls are the agent's: register no tools (or a Toolkit without them) to leave them out"),
    _same("rollout.max_env_worker"),
    SeedKey("rollout.mode", NO_EFFECT, "astuner's rollouts are always asynchronous (episodes run concurrently on the "
                                       "engine); rollouts ahead of training are trainer_common.off_policy"),
    SeedKey("rollout.gamma", NO_EFFECT, "astuner's reward is the episode's, shared by its samples (no per-step "
                                        "discount; the template's own note: experimental, do not change)"),
    _same("rollout.compute_madness_checklist"),
    SeedKey("rollout.agent_madness_termination", NO_EFFECT,
            "an episode that fails a madness check runs to its end and gets agent_madness_reward"),
    _same("rollout.agent_madness_reward"),
    _same("rollout.max_response_length_in_one_turn"),
    _same("rollout.max_model_len"),
    _same("rollout.multi_turn.max_sample_per_task"),
    SeedKey("rollout.multi_turn.max_steps", NO_EFFECT, "an episode's model calls are bounded by the agent (a "
                                                      "ReActAgent's max_iters) and by rollout.max_model_len"),
    SeedKey("rollout.multi_turn.expected_steps", NO_EFFECT,
            "Trinity's step size is sized from multi_turn.max_sample_per_task (every step fills one trainer step)"),
    _same("rollout.tensor_model_parallel_size"),
    SeedKey("rollout.n_vllm_engine", CONVERTED, "trainer_common.trinity_only__n_vllm_engine",
            _to("astuner.trainer_common.trinity_only__n_vllm_engine")),
    _same("rollout.max_num_seqs"),
    SeedKey("rollout.name", NO_EFFECT, "the engine is rollout.engine on debug (hf, vllm, openai) and vLLM on verl "
                                       "and trinity"),
    _same("rollout.num_repeat"),
    _same("rollout.temperature"),
    _same("rollout.top_p"),
    _same("rollout.val_kwargs.temperature"),
    SeedKey("rollout.val_kwargs.top_k", NO_EFFECT, "astuner samples with temperature and top_p (top_k -1: all tokens)"),
    _same("rollout.val_kwargs.top_p"),
    SeedKey("rollout.val_kwargs.do_sample", CONVERTED, "false = rollout.val_kwargs.temperature 0 (greedy); true = "
                                                       "its temperature as set", _do_sample),
    _same("rollout.val_kwargs.num_repeat"),
    SeedKey("rollout.step_skip_action", NO_EFFECT, "the seed's verl defaults only; astuner trains every sample"),
    SeedKey("rollout.submit_oversample_multiplier", NO_EFFECT, "the seed's verl defaults only; astuner rolls out "
                                                               "exactly train_batch_size tasks a step"),
    SeedKey("rollout.enable_oversample", NO_EFFECT, "the seed's verl defaults only; astuner rolls out exactly "
                                                    "train_batch_size tasks a step"),
    SeedKey("task_reader.type", CONVERTED, "task_reader.type; jsonl_dataset_file = dataset_file", _task_reader_type,
            keep=True),
    SeedKey("task_reader.jsonl_dataset_file", CONVERTED, "task_reader.dataset_file (training / validation "
                                                         "file_path)", _to("astuner.task_reader.dataset_file")),
    _same("task_reader.env_service.env_type"),
    _same("task_reader.env_service.env_url"),
    SeedKey("task_reader.env_service.env_action_preference", NO_EFFECT,
            "the workflow talks to the environment itself (workflow_task.env)"),
    _same("task_reader.env_service.training_split"),
    _same("task_reader.env_service.validation_split"),
    _same("task_reader.huggingface_dat_repo.dataset_path"),
    _same("task_reader.huggingface_dat_repo.training_split"),
    _same("task_reader.huggingface_dat_repo.validation_split"),
    SeedKey("task_reader.data_generation", NO_EFFECT, "astuner reads tasks, it does not generate them (its "
                                                      "task_reader.type data_generation is refused)"),
    SeedKey("task_judge.judge_type", CONVERTED, "customized_protocol = task_judge.judge_protocol, the judge; "
                                                "rubrics_auto_grader is refused (no astuner equivalent)", _judge_type),
    _same("task_judge.judge_protocol"),
    SeedKey("task_judge.alien_llm_model", NO_EFFECT, "a judge's LLM is task_judge.llm_judge (an auxiliary model of "
                                                     "the run or an endpoint); create_external_llm_fn takes its model "
                                                     "as an argument"),
    SeedKey("task_judge.alien_llm_response_length", NO_EFFECT, "as task_judge.alien_llm_model"),
    SeedKey("task_judge.rubrics_auto_grader", NO_EFFECT, "read with judge_type rubrics_auto_grader only, which is "
                                                         "refused"),
    SeedKey("debug.debug_max_parallel", NO_EFFECT, "the debug backbone runs rollout.max_env_worker episodes at once"),
    SeedKey("debug.debug_first_n_tasks", NO_EFFECT, "the debug backbone reads every task; stop early with "
                                                    "trainer_common.total_training_steps"),
    SeedKey("debug.debug_vllm_port", NO_EFFECT, "the debug backbone's engine runs in its own process (no port)"),
    SeedKey("debug.debug_vllm_seed", NO_EFFECT, "the debug backbone samples from rollout.seed"),
    SeedKey("debug.debug_tensor_parallel_size", NO_EFFECT, "rollout.tensor_model_parallel_size, on every backbone"),
    _same("trainer_common.val_before_train"),
    SeedKey("trainer_common.val_pass_n", CONVERTED,
            "rollout.val_kwargs.num_repeat: n episodes per validation task, val/pass@n reported",
            _to("astuner.rollout.val_kwargs.num_repeat")),
    _same("trainer_common.save_freq"),
    _same("trainer_common.test_freq"),
    _same("trainer_common.total_epochs"),
    _same("trainer_common.nnodes"),
    _same("trainer_common.n_gpus_per_node"),
    SeedKey("trainer_common.logger", CONVERTED, "trainer_common.logger, a list: the template's string s = "
                                                "[console, s]", _logger, keep=True),
    _same("trainer_common.algorithm.adv_estimator"),
    SeedKey("trainer_common.algorithm.use_kl_in_reward", CONVERTED,
            f"true = algorithm.use_kl_in_reward, {VERL_ONLY}; false (the template's) changes nothing", _kl_in_reward),
    _same("trainer_common.mini_batch_num"),
    SeedKey("trainer_common.fsdp_config", CONVERTED, f"actor_rollout_ref.actor.fsdp_config, {VERL_ONLY}",
            _leaves_into("actor_rollout_ref.actor.fsdp_config")),
    _same("trainer_common.optim.lr"),
    SeedKey("trainer_common.use_kl_loss", CONVERTED, "trainer_common.algorithm.use_kl_loss",
            _to("astuner.trainer_common.algorithm.use_kl_loss")),
    SeedKey("trainer_common.kl_loss_coef", CONVERTED, "trainer_common.algorithm.kl_loss_coef",
            _to("astuner.trainer_common.algorithm.kl_loss_coef")),
    SeedKey("trainer_common.kl_loss_type", CONVERTED, "trainer_common.algorithm.kl_loss_type",
            _to("astuner.trainer_common.algorithm.kl_loss_type")),
    SeedKey("trainer_common.ulysses_sequence_parallel_size", CONVERTED,
            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size, {VERL_ONLY}",
            _to("actor_rollout_ref.actor.ulysses_sequence_parallel_size")),
    SeedKey("trainer_common.checkpoint_base_dir", NO_EFFECT, "checkpoints are kept in the run folder "
                                                             "({--exp-dir}/{experiment_name}/checkpoints)"),
    SeedKey("context_tracker", NO_EFFECT, "astuner's context tracker splits an episode's calls where a prompt stops "
                                          "extending the last (no type to choose, no LLM of its own)"),
    SeedKey("execute_test", NO_EFFECT, "the seed system's own test harness"),
    SeedKey("execute_testing_lambda", NO_EFFECT, "the seed system's own test harness"),
)
BY_KEY = {entry.key: entry for entry in TABLE}


def _take(tree: dict, dotted: str, remove: bool) -> tuple[bool, Any]:
    """(found, value) of `dotted` in `tree`; with `remove`, taken out of it (and the sections it leaves empty)."""
    path = [tree]
    for part in dotted.split(".")[:-1]:
        node = path[-1].get(part)
        if not isinstance(node, dict):
            return False, None
        path.append(node)
    last = dotted.split(".")[-1]
    if last not in path[-1]:
        return False, None
    if not remove:
        return True, path[-1][last]
    value = path[-1].pop(last)
    for parent, part, node in reversed(list(zip(path, dotted.split("."), path[1:]))):
        if not node:
            del parent[part]
    return True, value


def translate(merged: dict) -> list[str]:
    """The seed template's keys in `merged["astuner"]` turned into astuner's (in place); one line per key taken with
    no effect or converted, for the user. Raises ConfigError for a value astuner cannot honour."""
    tree = merged.get("astuner")
    if not isinstance(tree, dict):
        return []
    notes = []
    for entry in TABLE:
        if entry.does == SAME:
            continue
        found, value = _take(tree, entry.key, remove=not entry.keep)
        if not found:
            continue
        if not entry.keep:  # kept as written for the seed workflows' model_tuner.config (config.composed_view)
            merged.setdefault(AS_WRITTEN, {})[entry.key] = value
        try:
            changed = entry.convert(value, merged) if entry.convert is not None else None
        except _Contradicts as exc:
            raise ConfigError(f"astuner.{entry.key} {value!r} (the seed system's name for {exc.dotted}) contradicts "
                              f"{exc.dotted} {exc.there!r} in the same config; keep one") from None
        if entry.does == NO_EFFECT:
            notes.append(f"astuner.{entry.key} (the seed system's key): no effect: {entry.how}")
        elif changed or not entry.keep:
            shown = "{...}" if isinstance(value, dict) else repr(value)
            notes.append(f"astuner.{entry.key} {shown} (the seed system's key): read as {entry.how}")
    return notes


def trinity_schedule(merged: dict) -> list[str]:
    """`trinity.synchronizer.sync_interval` / `sync_offset` in an astuner YAML's `trinity:` subtree (the seed
    tutorials set `sync_offset: 1` there): the schedule, which has one meaning on every backbone
    (`trainer_common.off_policy`), not a Trinity-only setting the debug backbone would not read. One line each; a
    WARNING line (`WarningNote`) when they make the run off-policy, with the key that keeps it synchronous:
    `astuner.trainer_common.off_policy.max_staleness: 0`, which, set, leaves them unread."""
    sync = (merged.get("trinity") or {}).get("synchronizer")
    if not isinstance(sync, dict):
        return []
    given = {key: sync.pop(key) for key in ("sync_interval", "sync_offset") if key in sync}
    if not given:
        return []
    _, bound = _take(merged, f"{OFF_POLICY}.max_staleness", remove=False)
    shown = ", ".join(f"trinity.synchronizer.{key} {value!r}" for key, value in given.items())
    if bound == 0:  # asked for: a synchronous run, whatever the seed file's Trinity schedule
        return [f"{shown}: not read ({OFF_POLICY}.max_staleness 0: every step rolled out on the weights it trains)"]
    defaults = {"sync_interval": 1, "sync_offset": None}
    for key, value in given.items():
        target = f"{OFF_POLICY}.{key}"
        found, own = _take(merged, target, remove=False)
        if found and own not in (defaults[key], value):
            raise ConfigError(f"trinity.synchronizer.{key} {value!r} and {target} {own!r} disagree: they are the same "
                              f"setting; keep {target}")
        set_path(merged, target, value)
    targets = " and ".join(f"{OFF_POLICY}.{key}" for key in given)
    line = f"{shown}: read as {targets} (the same schedule on every backbone)"
    lag = (given.get("sync_interval") or 1) - 1 + (given.get("sync_offset") or 0)
    if not isinstance(lag, int) or lag <= 0:
        return [line]
    return [WarningNote(f"{line}: this run is off-policy, its samples up to {lag} version(s) older than the weights "
                        f"they train (docs/off_policy.md); {OFF_POLICY}.max_staleness=0 keeps it synchronous")]


def table() -> str:
    """docs/migration.md's table of the seed template's keys."""
    rows = ["| the seed system's key (`astuner.` ...) | in astuner |", "| --- | --- |"]
    for entry in TABLE:
        how = {SAME: f"the same: `{entry.how}`", CONVERTED: f"converted: {entry.how}",
               NO_EFFECT: f"no effect: {entry.how}"}[entry.does]
        rows.append(f"| `{entry.key}` | {how} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(table() + "\n")
