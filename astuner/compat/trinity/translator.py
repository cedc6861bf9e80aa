"""The key-by-key translation of a Trinity-RFT config into an astuner tree (`config.translate` runs it)."""

from __future__ import annotations

import copy
import difflib
import math
from typing import Any

from astuner.config.schema import OPERATORS, MultiTurnConfig
from astuner.errors import UserError
from astuner.compat.trinity import schema
from astuner.compat.trinity import values
from astuner.compat.trinity.config import (ADVANTAGE_ARGS, ALGORITHMS, ALIASES, EVERYWHERE, KL_TYPES, MONITORS,
                                           SYNC_KEYS, TRINITY_RUNTIME, Translation)
from astuner.compat.trinity.tasksets import Tasksets
from astuner.compat.trinity.values import short
from astuner.config.keys import set_path

# astuner's rollout.multi_turn.max_sample_per_task, which a Trinity config cannot set
MAX_SAMPLES_PER_EPISODE = MultiTurnConfig().max_sample_per_task


def drop(conf: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    for path in paths:
        *parents, last = path.split(".")
        node: Any = conf
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return conf


def _same(path: str, value: Any, default: Any) -> bool:
    alias = ALIASES.get(path, {})
    if isinstance(value, str) and alias:
        value = alias.get(value.lower(), value.lower())
    return value == default


class Translator(Tasksets):
    """One translation: the file's keys flattened to dotted paths (`leaves`), each either translated (`used`),
    refused (`problems`, `unknown`), or left for `_rest` (Trinity's default, the trinity: subtree, or refused).
    A value of the wrong type is refused up front (`bad`) and the translation goes on as if it were absent."""

    def __init__(self, conf: dict[str, Any], backbone: str, source: str, supplied: set[str]) -> None:
        self.backbone, self.source, self.supplied = backbone, source, supplied
        self.defaults = schema.defaults()
        self.leaves: dict[str, Any] = {}
        self.unknown: list[str] = []
        self.used: set[str] = set()
        self.problems: list[str] = []  # refused on every backbone
        self.force: set[str] = set()  # keys with no astuner meaning even at Trinity's default
        self.accepted: list[str] = []
        self.ignored: dict[str, str] = {}  # keys tune()'s functions make unread -> why
        self.bad: set[str] = set()  # keys whose value had the wrong type
        self.unknown_sections: set[str] = set()  # unknown keys holding a mapping: a misspelt section, likely
        self.tasksets: list[str] = []  # the tasksets' dotted names, for suggestions
        self.a: dict[str, Any] = {}
        self.sections = {p.rsplit(".", i)[0] for p in self.defaults for i in range(1, p.count(".") + 1)}
        conf = dict(conf)
        self.section = conf.pop("astuner", None)  # astuner keys set over the translation
        if self.section is not None and not isinstance(self.section, dict):
            self.problems.append(f"astuner: must be a mapping of astuner keys, got {short(self.section)}")
            self.section = None
        self.approximated: dict[str, str] = {}
        self.warnings: list[str] = []
        self.trinity_only: list[str] = []
        buffer = conf.get("buffer")
        self.explorer_input = (buffer.get("explorer_input") or {}) if isinstance(buffer, dict) else {}
        self._flatten(conf, "")
        for path, spec in values.CONFIG.items():
            why = values.problem(self.leaves[path], spec) if path in self.leaves else None
            if why:
                self.refuse(path, why)
                self.bad.add(path)
                del self.leaves[path]

    # -- reading --------------------------------------------------------------------------------------
    def _flatten(self, node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if path == "buffer.explorer_input":
                continue  # the tasksets: _tasksets()
            if path in schema.FN_ARGS and isinstance(value, dict):
                self.leaves.update({f"{path}.{sub}": v for sub, v in value.items()})
            elif path in self.defaults:
                self.leaves[path] = value
            elif path in self.sections and isinstance(value, dict):
                self._flatten(value, path + ".")
            elif path in self.sections and value is not None:
                self.refuse(path, f"must be a mapping, got {short(value)}")
            elif path not in self.sections:
                self.unknown.append(path)
                if isinstance(value, dict):
                    self.unknown_sections.add(path)

    def default(self, path: str) -> Any:
        if path in self.defaults:
            return self.defaults[path]
        prefix, _, sub = path.rpartition(".")
        return schema.FN_ARGS.get(prefix, {}).get(sub, _NONE)

    def get(self, path: str) -> Any:
        """The file's value (Trinity's default when it has none); the key counts as translated."""
        self.used.add(path)
        return self.leaves.get(path, self.default(path))

    def given(self, path: str) -> bool:
        return path in self.leaves

    def put(self, key: str, value: Any) -> None:
        set_path(self.a, key, value)

    def refuse(self, path: str, why: str) -> None:
        self.used.add(path)
        self.problems.append(f"{path}: {why}")

    # -- the translation ------------------------------------------------------------------------------
    def run(self) -> Translation:
        g = self.get
        for key, target in (("project", "project_name"), ("name", "experiment_name")):
            if self.given(key):
                self.put(target, str(g(key)))
        out = Translation(tree={}, checkpoint_root_dir=g("checkpoint_root_dir") or None, group=g("group") or "",
                          continue_from_checkpoint=bool(g("continue_from_checkpoint")))
        self._cluster()
        self._algorithm()
        self._model()
        self._lora()
        self._loop()
        self._advantage()
        self._auxiliary()
        self._tasksets()
        for path, why in EVERYWHERE.items():
            if self.given(path) and not _same(path, self.leaves[path], self.default(path)):
                self.refuse(path, why)
        trinity = self._rest(out)
        if self.unknown or self.problems:
            sections = sorted(self.sections) + list(schema.FN_ARGS) + ["buffer.explorer_input"]
            known = list(self.defaults) + [f"{name}.{key}" for name in self.tasksets for key in schema.TASKSET] + [
                "buffer.explorer_input." + key for key in schema.EXPLORER_INPUT] + sections
            near = {p: (_close(p, sections) if p in self.unknown_sections else "") or _close(p, known)
                    for p in self.unknown}
            wrong = [f"{p}: not a Trinity-RFT 0.6 config key{near[p]}" for p in self.unknown]
            raise UserError(f"{self.source} (a Trinity-RFT config): " + "; ".join(wrong + self.problems))
        from astuner.backbone.translate_common import deep_merge

        out.tree = {"astuner": deep_merge(self.a, self.section or {}), **({"trinity": trinity} if trinity else {})}
        out.ignored = dict(self.ignored)
        out.approximated = dict(self.approximated)
        out.warnings = list(self.warnings)
        return out

    def _cluster(self) -> None:
        g = self.get
        nodes, gpus = g("cluster.node_num"), g("cluster.gpu_per_node")
        if nodes:  # 0: Trinity counts the cluster's GPUs; astuner's trainer_common then stays
            self.put("trainer_common.nnodes", nodes)
        if gpus:
            self.put("trainer_common.n_gpus_per_node", gpus)
        mode = g("mode")
        if mode == "colocate":
            if (nodes or 1) * (gpus or 1) > 1:
                self.refuse("mode", f"colocate shares one GPU, the cluster has {nodes} × {gpus}; remove mode "
                                    f"(astuner picks colocate on one GPU and both on more)")
            self.put("trainer_common.nnodes", 1)
            self.put("trainer_common.n_gpus_per_node", 1)
        elif mode != "both":
            self.refuse("mode", f"{mode!r}: tune() trains (Trinity's both mode, or colocate on one GPU)")

    def _algorithm(self) -> None:
        g, given = self.get, self.given
        kind = self.leaves.get("algorithm.algorithm_type")
        self.used.add("algorithm.algorithm_type")
        if kind in ALGORITHMS:
            self.put("trainer_common.algorithm.adv_estimator", kind)
        elif kind is None and "algorithm" not in self.supplied and "algorithm.algorithm_type" not in self.bad:
            self.refuse("algorithm.algorithm_type", "not set (Trinity's default is ppo, which trains a critic); set "
                                                    "multi_step_grpo or grpo, or pass tune(algorithm=...)")
        elif kind is not None:  # no astuner meaning (ppo, Trinity's default, included): Trinity's, or refused
            self.used.discard("algorithm.algorithm_type")
            self.force.add("algorithm.algorithm_type")
        self.put("rollout.num_repeat", g("algorithm.repeat_times"))
        for key, target in (("lr", "lr"), ("weight_decay", "weight_decay"), ("betas", "betas")):
            self.put(f"trainer_common.optim.{target}", g(f"algorithm.optimizer.{key}"))
        warm = g("algorithm.optimizer.lr_warmup_steps")
        if warm > 0:
            self.put("trainer_common.optim.warmup_steps", warm)
        elif g("algorithm.optimizer.lr_warmup_steps_ratio") == 0:
            self.put("trainer_common.optim.warmup_steps", 0)
        elif self.leaves.get("trainer.total_steps"):  # Trinity's schedule: ratio × trainer.total_steps
            self.put("trainer_common.optim.warmup_steps",
                     int(g("algorithm.optimizer.lr_warmup_steps_ratio") * self.leaves["trainer.total_steps"]))
        else:
            self.used.discard("algorithm.optimizer.lr_warmup_steps_ratio")  # a ratio of no step count
        clips = {p: self.leaves[p] for p in ("algorithm.optimizer.clip_grad", "trainer.grad_clip") if given(p)}
        self.used.update(("algorithm.optimizer.clip_grad", "trainer.grad_clip"))
        if len(set(clips.values())) > 1:
            self.refuse("trainer.grad_clip", f"{clips['trainer.grad_clip']} differs from algorithm.optimizer."
                                             f"clip_grad {clips['algorithm.optimizer.clip_grad']}; astuner clips once")
        self.put("trainer_common.optim.grad_clip", next(iter(clips.values()), 1.0))
        agg = g("algorithm.loss_agg_mode") or "token-mean"
        self.put("trainer_common.algorithm.loss_agg_mode", agg)
        if g("algorithm.policy_loss_fn") in (None, "ppo"):
            p = "algorithm.policy_loss_fn_args."
            both = g(p + "clip_range")
            self.put("trainer_common.algorithm.clip_ratio_low", g(p + "clip_range_low") or both)
            self.put("trainer_common.algorithm.clip_ratio_high", g(p + "clip_range_high") or both)
            self.put("trainer_common.algorithm.clip_ratio_c", g(p + "clip_ratio_c"))
            if g(p + "loss_agg_mode") != agg and given(p + "loss_agg_mode"):
                self.refuse(p + "loss_agg_mode", f"Trinity replaces it with algorithm.loss_agg_mode ({agg}); set that")
        else:
            self.used.discard("algorithm.policy_loss_fn")
        kl = g("algorithm.kl_loss_fn")
        if kl is None or kl in KL_TYPES:  # absent: no KL loss (Trinity's GRPO default k2 has no astuner meaning)
            self.put("trainer_common.algorithm.use_kl_loss", bool(KL_TYPES.get(kl)))
            if KL_TYPES.get(kl):
                self.put("trainer_common.algorithm.kl_loss_type", KL_TYPES[kl])
            self.put("trainer_common.algorithm.kl_loss_coef", g("algorithm.kl_loss_fn_args.kl_coef"))
        else:
            self.used.discard("algorithm.kl_loss_fn")
        entropy = g("algorithm.entropy_loss_fn")
        if entropy in (None, "default", "none"):
            coef = g("algorithm.entropy_loss_fn_args.entropy_coef") if entropy != "none" else 0.0
            self.put("trainer_common.algorithm.entropy_coeff", coef)
        else:
            self.used.discard("algorithm.entropy_loss_fn")
        # the algorithm's own choices, named explicitly, change nothing
        own = {"algorithm.advantage_fn": (None, ALGORITHMS.get(kind)), "algorithm.kl_penalty_fn": (None, "none"),
               "algorithm.sample_strategy": (None, "default")}
        self.used.update(p for p, values in own.items() if self.leaves.get(p) in values)

    def _model(self) -> None:
        g = self.get
        if "model" in self.supplied:  # the file's rollout_model is replaced; what the argument gives is read
            self.used.update(p for p in self.leaves if p.startswith("explorer.rollout_model."))
            return
        path = g("model.model_path")
        if not path:
            self.refuse("model.model_path", "not set; set it to a hub id or a local model folder")
        self.put("model.path", path)
        self._lengths()
        self.put("rollout.temperature", g("model.temperature"))
        self.put("rollout.top_p", g("model.top_p"))
        thinking = [self.leaves[p] for p in ("model.enable_thinking", "explorer.rollout_model.enable_thinking")
                    if self.leaves.get(p) is not None]
        self.used.update(("model.enable_thinking", "explorer.rollout_model.enable_thinking"))
        if thinking:
            self.put("rollout.chat_template_kwargs.enable_thinking", thinking[-1])
        m = "explorer.rollout_model."
        self.put("trainer_common.trinity_only__n_vllm_engine", g(m + "engine_num"))
        self.put("rollout.tensor_model_parallel_size", g(m + "tensor_parallel_size"))
        for key, target in (("gpu_memory_utilization", "gpu_memory_utilization"), ("seed", "seed"),
                            ("tool_call_parser", "tool_call_parser"), ("reasoning_parser", "reasoning_parser")):
            if self.leaves.get(m + key) is not None:
                self.put(f"rollout.{target}", g(m + key))
        # astuner's ModelTuner is the workflow's model on every backbone: OpenAI-style calls, each recorded,
        # tool calls parsed; what these switch on in Trinity is always on
        self.used.update(m + k for k in ("enable_openai_api", "enable_history", "enable_auto_tool_choice"))
        extra = dict(self.leaves.get(m + "extra_engine_args") or {})
        if "max_num_seqs" in extra:
            self.put("rollout.max_num_seqs", extra.pop("max_num_seqs"))
            self.leaves[m + "extra_engine_args"] = extra

    def _lengths(self) -> None:
        """max_model_len, max_prompt_tokens, max_response_tokens as Trinity derives them
        (ModelConfigValidator._check_model_len), except that a prompt or response limit leaving the other no
        room (Trinity cuts it to max_model_len - 1, leaving one token) is refused."""
        keys = ("model.max_model_len", "model.max_prompt_tokens", "model.max_response_tokens")
        total, prompt, response = (self.get(k) for k in keys)
        if self.bad.intersection(keys):
            return  # refused already
        if total is None:
            if prompt is None or response is None:
                self.refuse("model.max_model_len", "not set, and max_prompt_tokens + max_response_tokens cannot "
                                                   "stand in for it; set it")
                return
            total = prompt + response
        for key, own, other in ((keys[2], response, "prompt"), (keys[1], prompt, "response")):
            if own is not None and own >= total:
                self.refuse(key, f"{own} leaves the {other} no room in model.max_model_len ({total}); set it below "
                                 f"max_model_len")
                return
        if prompt is None and response is None:
            prompt = total // 2
            response = total - prompt
        elif prompt is None:
            prompt = total - response
        elif response is None:
            response = total - prompt
        elif prompt + response > total:
            self.refuse("model.max_response_tokens", f"max_prompt_tokens + max_response_tokens ({prompt} + {response}) "
                                                     f"exceed max_model_len ({total})")
        self.put("rollout.max_model_len", total)
        self.put("data.max_prompt_length", prompt)
        self.put("data.max_response_length", response)
        self.put("rollout.max_response_length_in_one_turn", min(response, total - 1))

    def _lora(self) -> None:
        """model.lora_configs (one adapter, trained from scratch) as astuner's model.lora."""
        loras = self.leaves.get("model.lora_configs")
        self.used.add("model.lora_configs")
        if loras is None:
            return
        if not isinstance(loras, list) or len(loras) != 1 or not isinstance(loras[0], dict):
            self.refuse("model.lora_configs", "astuner trains one LoRA adapter (as Trinity-RFT does); keep one")
            return
        entry, name = loras[0], "model.lora_configs[0]"
        for key, value in entry.items():
            if key not in schema.LORA:
                self.unknown.append(f"{name}.{key}")
            elif key == "path" and value is not None:
                self.refuse(f"{name}.path", "astuner trains a new adapter; starting from a saved one has no astuner "
                                            "meaning (merge it into the model first)")
            elif key not in ("name", "lora_rank", "lora_alpha", "target_modules") and value != schema.LORA[key]:
                self.refuse(f"{name}.{key}", f"{value!r} has no astuner meaning (model.lora: rank, alpha, "
                                             f"target_modules)")
        modules = entry.get("target_modules", schema.LORA["target_modules"])
        if isinstance(modules, str) and modules != "all-linear":
            modules = [m.strip() for m in modules.split(",") if m.strip()]
        self.put("model.lora", {"rank": entry.get("lora_rank", schema.LORA["lora_rank"]),
                                "alpha": entry.get("lora_alpha", schema.LORA["lora_alpha"]),
                                "target_modules": modules})

    def _loop(self) -> None:
        g = self.get
        self.put("data.train_batch_size", g("buffer.batch_size"))
        self.put("trainer_common.total_epochs", g("buffer.total_epochs"))
        steps = [s for s in (g("buffer.total_steps"), g("trainer.total_steps")) if s]
        self.put("trainer_common.total_training_steps", min(steps) if steps else None)
        per_step = self.leaves.get("buffer.train_batch_size")
        most = g("buffer.batch_size") * g("algorithm.repeat_times")
        if per_step in (0, most):
            self.used.add("buffer.train_batch_size")  # Trinity's own count: astuner's step takes each step's samples
        elif self.backbone != "trinity" and isinstance(per_step, int) and per_step > most:
            self.used.add("buffer.train_batch_size")
            self.approximated["buffer.train_batch_size"] = (
                f"{per_step}: each step trains once on all the samples of its {most} episodes (Trinity counts "
                f"experiences, one per model call, and may carry some to its next update)")
        elif self.backbone == "trinity" and isinstance(per_step, int) and per_step < most:
            # astuner pads each explorer step to what it can yield, so that it is one trainer step: the step the
            # file sizes gives each episode its share (backbone.trinity.translate.samples_per_episode)
            self.refuse("buffer.train_batch_size", f"{per_step} holds less than one sample of each of an explorer "
                                                   f"step's episodes (batch_size × repeat_times = {most}); remove it "
                                                   f"(each episode then keeps up to {MAX_SAMPLES_PER_EPISODE} samples)")
        if self.given("explorer.runner_per_model"):
            engines = g("explorer.rollout_model.engine_num")
            self.put("rollout.max_env_worker", g("explorer.runner_per_model") * engines * g("algorithm.repeat_times"))
        self.put("rollout.episode_timeout_s", g("explorer.max_timeout"))
        if self.backbone != "trinity":  # a failed episode run again, in a fresh environment (Trinity's default: 2)
            self.put("rollout.episode_retries", g("explorer.max_retry_times"))
        for path in ("synchronizer.sync_interval", "synchronizer.sync_offset"):  # Trinity's schedule, its meaning
            if self.given(path):
                self.put(f"trainer_common.off_policy.{path.split('.')[1]}", g(path))
        self._off_policy_warning()
        self.put("trainer_common.test_freq", g("explorer.eval_interval"))
        self.put("trainer_common.val_before_train", bool(g("explorer.eval_on_startup")))
        save = g("trainer.save_interval")
        self.put("trainer_common.save_freq", save if save > 0 else -1)  # 0: Trinity saves at the end only
        if self.leaves.get("trainer.max_token_len_per_gpu"):
            self.put("trainer_common.max_token_len_per_micro_batch", g("trainer.max_token_len_per_gpu"))
        self.put("trainer_common.max_checkpoints_to_keep", g("trainer.max_checkpoints_to_keep") or None)
        verl = copy.deepcopy(self.leaves.get("trainer.trainer_config") or {})
        ref = verl.get("actor_rollout_ref")
        actor = ref.get("actor") if isinstance(ref, dict) else None
        if isinstance(actor, dict) and "ppo_epochs" in actor:
            self.put("trainer_common.ppo_epochs", actor.pop("ppo_epochs"))
            self.leaves["trainer.trainer_config"] = _pruned(verl)
        monitor = g("monitor.monitor_type")
        if "monitor_type" not in self.supplied and monitor in MONITORS:
            self.put("trainer_common.logger", ["console", monitor])
        elif "monitor_type" not in self.supplied:  # Trinity's monitors are these too
            self.refuse("monitor.monitor_type", f"{monitor!r} is not one of {', '.join(MONITORS)}"
                                                f"{_close(monitor, list(MONITORS), cutoff=0.6)}")
        ops = self.leaves.get("data_processor.experience_pipeline.operators")
        if ops and all(isinstance(op, dict) and op.get("name") in OPERATORS for op in ops):
            self.put("data_processor.experience_pipeline.operators", g("data_processor.experience_pipeline.operators"))
        buffer = self.leaves.get("buffer.trainer_input.experience_buffer")
        if self.backbone != "trinity" and isinstance(buffer, dict):
            rest, rb = dict(buffer), buffer.get("replay_buffer")
            if isinstance(rb, dict) and rb.get("reuse_cooldown_time") is None and \
                    set(rb) <= {"enable", "priority_fn", "priority_fn_args"}:
                del rest["replay_buffer"]
            if all(_runtime_only(f"buffer.trainer_input.experience_buffer.{k}") for k in rest):
                self.used.add("buffer.trainer_input.experience_buffer")
                self.trinity_only.extend(f"buffer.trainer_input.experience_buffer.{k}" for k in rest)
                if "replay_buffer" in buffer:
                    self.approximated["buffer.trainer_input.experience_buffer.replay_buffer"] = (
                        "without reuse_cooldown_time no experience is trained twice; each step's are trained "
                        "together, in lockstep")
        if self.backbone != "trinity":
            for path in SYNC_KEYS:  # how weights travel: the schedule (sync_interval, sync_offset) is what they mean
                if self.given(path) and not _same(path, self.leaves[path], "fully_async"):
                    self.used.add(path)
                    self.accepted.append(path)

    def _off_policy_warning(self) -> None:
        """On another backbone than Trinity, a schedule that rolls out ahead is said in one WARNING line, with what
        keeps the run synchronous (on Trinity it is the file's own setting)."""
        interval, offset = self.get("synchronizer.sync_interval"), self.get("synchronizer.sync_offset")
        own = ((self.section or {}).get("trainer_common") or {}).get("off_policy") or {}
        if self.backbone == "trinity" or own.get("max_staleness") == 0 or \
                not all(isinstance(v, int) for v in (interval, offset or 0)):
            return
        lag = interval - 1 + (offset or 0)
        if lag > 0:
            self.warnings.append(f"{self.source}: synchronizer.sync_interval {interval}, sync_offset {offset}: this "
                                 f"{self.backbone} run is off-policy, its samples up to {lag} version(s) older than "
                                 f"the weights they train (docs/off_policy.md); sync_interval 1 and sync_offset 0 in "
                                 f"that file keep it synchronous")

    def _advantage(self) -> None:
        """algorithm.advantage_fn_args: what astuner's advantage takes (epsilon, enable_step_norm) on debug; with
        backbone trinity they go to Trinity as they are."""
        args = self.leaves.get("algorithm.advantage_fn_args")
        if self.backbone == "trinity" or not args:
            return
        self.used.add("algorithm.advantage_fn_args")
        if not isinstance(args, dict):
            self.refuse("algorithm.advantage_fn_args", f"must be a mapping, got {short(args)}")
            return
        for name, value in args.items():
            path = f"algorithm.advantage_fn_args.{name}"
            if name in ADVANTAGE_ARGS and (self.backbone == "debug" or value == schema.ADVANTAGE_DEFAULTS[name]):
                self.put(ADVANTAGE_ARGS[name], value)
            elif name == "std_threshold" and self.backbone == "debug":
                self._std_threshold(path, value)
            elif name == "step_norm" and self.leaves.get("algorithm.algorithm_type") in ("multi_step_grpo", None):
                self.ignored[path] = ("Trinity-RFT 0.6's step-wise GRPO takes it into **kwargs and never reads it "
                                      "(it reads enable_step_norm), so it does nothing there either")
            elif name in ADVANTAGE_ARGS:
                self.refuse(path, f"{value!r}: the {self.backbone} backbone computes advantages its own way; remove it "
                                  f"or use backbone=\"debug\" or \"trinity\"")
            else:
                self.refuse(path, f"{value!r}: astuner's advantage takes {', '.join(ADVANTAGE_ARGS)} only; remove it, "
                                  f"or use backbone=\"trinity\" (it hands it to Trinity-RFT)")

    def _std_threshold(self, path: str, value: Any) -> None:
        """std_threshold t: Trinity's GRPO (and step-wise GRPO) leaves out a group whose rewards' sample std
        (torch.std) is at most t, and a group of one; astuner's reward_std_filter operator leaves out one whose
        population std is at most its threshold, and a group of one: the same groups of n episodes (repeat_times)
        at threshold t·sqrt((n-1)/n) (to rounding at t itself: Trinity computes in float32), after the file's
        operators."""
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            self.refuse(path, f"must be a number of at least 0, got {short(value)}")
            return
        n = self.get("algorithm.repeat_times")
        threshold = float(value) * math.sqrt((n - 1) / n) if isinstance(n, int) and n > 1 else 0.0
        operators = ((self.a.get("data_processor") or {}).get("experience_pipeline") or {}).get("operators") or []
        self.put("data_processor.experience_pipeline.operators",
                 [*operators, {"name": "reward_std_filter", "args": {"threshold": threshold}}])

    def _auxiliary(self) -> None:
        """explorer.auxiliary_models as astuner.auxiliary_models (each backbone serves them), by their `name`."""
        models = self.leaves.get("explorer.auxiliary_models")
        self.used.add("explorer.auxiliary_models")
        if not models:
            return
        if not isinstance(models, list):
            self.refuse("explorer.auxiliary_models", f"must be a list of models, got {short(models)}")
            return
        out: dict[str, Any] = {}
        for i, entry in enumerate(models):
            where = f"explorer.auxiliary_models[{i}]"
            if not isinstance(entry, dict) or not entry.get("name") or not entry.get("model_path"):
                self.refuse(where, "needs a name (the workflow's auxiliary_models key) and a model_path")
                continue
            spec: dict[str, Any] = {"path": str(entry["model_path"])}
            rollout = self.a.get("rollout", {})
            # unset: Trinity takes the model section's value (its config validator), as here
            inherited = {"temperature": self.leaves.get("model.temperature"), "top_p": self.leaves.get("model.top_p"),
                         "max_response_tokens": rollout.get("max_response_length_in_one_turn"),
                         "max_model_len": rollout.get("max_model_len"),
                         "enable_thinking": self.leaves.get("model.enable_thinking")}
            for key, target in (("temperature", "temperature"), ("top_p", "top_p"),
                                ("max_response_tokens", "max_tokens"), ("max_model_len", "max_model_len"),
                                ("enable_thinking", "enable_thinking")):
                value = entry.get(key, inherited[key])
                if value is not None:
                    spec[target] = value
            out[str(entry["name"])] = spec
        self.put("auxiliary_models", out)

    def _rest(self, out: Translation) -> dict[str, Any]:
        """Keys not translated: at Trinity's default they change nothing; else to Trinity, or refused."""
        trinity: dict[str, Any] = {}
        foreign = []
        for path, value in self.leaves.items():
            if path in self.used or (path not in self.force and _same(path, value, self.default(path))):
                continue
            if self.backbone == "trinity":
                set_path(trinity, path, value)
                out.passed.append(path)
            elif path not in self.force and _runtime_only(path):
                self.trinity_only.append(path)
            else:
                foreign.append(f"{path}={short(value)}")
        out.accepted = self.accepted
        out.trinity_only = self.trinity_only
        if foreign:
            self.problems.append(f"{', '.join(foreign)}: Trinity-RFT settings with no astuner meaning, which the "
                                 f"{self.backbone} backbone cannot honour; remove them, or use backbone=\"trinity\" "
                                 f"(it hands them to Trinity-RFT)")
        return trinity


def _runtime_only(path: str) -> bool:
    return any(path == key or (key.endswith(".") and path.startswith(key)) for key in TRINITY_RUNTIME)


class _Missing:
    def __repr__(self) -> str:
        return "<no default>"


_NONE = _Missing()


def _pruned(tree: dict[str, Any]) -> dict[str, Any]:
    """`tree` without its empty mappings."""
    out = {}
    for key, value in tree.items():
        value = _pruned(value) if isinstance(value, dict) else value
        if value != {}:
            out[key] = value
    return out


def _close(path: str, known: list[str], cutoff: float = 0.8) -> str:
    close = difflib.get_close_matches(path, list(known), n=1, cutoff=cutoff)
    return f" (did you mean '{close[0]}'?)" if close else ""
