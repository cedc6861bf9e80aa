"""The key-by-key translation of a Trinity-RFT config into an astuner tree (`trinity_config.translate`)."""

from __future__ import annotations

import copy
import difflib
from typing import Any

from astuner.config.schema import OPERATORS, MultiTurnConfig
from astuner.errors import UserError
from astuner.tuner import trinity_schema as schema
from astuner.tuner.trinity_config import (ALGORITHMS, ALIASES, EVERYWHERE, KL_TYPES, MONITORS, SYNC_KEYS, TASKSET_ONLY,
                                          WORKFLOW_ADAPTER, Translation)

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


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[last] = value


def _same(path: str, value: Any, default: Any) -> bool:
    alias = ALIASES.get(path, {})
    if isinstance(value, str) and alias:
        value = alias.get(value.lower(), value.lower())
    return value == default


class Translator:
    """One translation: the file's keys flattened to dotted paths (`leaves`), each either translated (`used`),
    refused (`problems`, `unknown`), or left for `_rest` (Trinity's default, the trinity: subtree, or refused)."""

    def __init__(self, conf: dict[str, Any], backbone: str, source: str, supplied: set[str]) -> None:
        self.backbone, self.source, self.supplied = backbone, source, supplied
        self.defaults = schema.defaults()
        self.leaves: dict[str, Any] = {}
        self.unknown: list[str] = []
        self.used: set[str] = set()
        self.problems: list[str] = []  # refused on every backbone
        self.force: set[str] = set()  # keys with no astuner meaning even at Trinity's default
        self.accepted: list[str] = []
        self.tasksets: list[str] = []  # the tasksets' dotted names, for suggestions
        self.a: dict[str, Any] = {}
        self.sections = {p.rsplit(".", i)[0] for p in self.defaults for i in range(1, p.count(".") + 1)}
        buffer = conf.get("buffer")
        self.explorer_input = (buffer.get("explorer_input") or {}) if isinstance(buffer, dict) else {}
        self._flatten(conf, "")

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
                self.refuse(path, f"must be a mapping, got {_short(value)}")
            elif path not in self.sections:
                self.unknown.append(path)

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
        self._tasksets()
        for path, why in EVERYWHERE.items():
            if self.given(path) and not _same(path, self.leaves[path], self.default(path)):
                self.refuse(path, why)
        trinity = self._rest(out)
        if self.unknown or self.problems:
            known = list(self.defaults) + [f"{name}.{key}" for name in self.tasksets for key in schema.TASKSET] + [
                "buffer.explorer_input." + key for key in schema.EXPLORER_INPUT]
            wrong = [f"{p}: not a Trinity-RFT 0.6 config key{_close(p, known)}" for p in self.unknown]
            raise UserError(f"{self.source} (a Trinity-RFT config): " + "; ".join(wrong + self.problems))
        out.tree = {"astuner": self.a, **({"trinity": trinity} if trinity else {})}
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
        elif kind is None and "algorithm" not in self.supplied:
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
        g, given = self.get, self.given
        if "model" in self.supplied:  # the file's rollout_model is replaced; what the argument gives is read
            self.used.update(p for p in self.leaves if p.startswith("explorer.rollout_model."))
            return
        path = g("model.model_path")
        if not path:
            self.refuse("model.model_path", "not set; set it to a hub id or a local model folder")
        self.put("model.path", path)
        total, prompt, response = g("model.max_model_len"), g("model.max_prompt_tokens"), g("model.max_response_tokens")
        if total is None:  # Trinity's own derivation of the three lengths (ModelConfigValidator._check_model_len)
            if prompt is None or response is None:
                self.refuse("model.max_model_len", "not set, and max_prompt_tokens + max_response_tokens cannot "
                                                   "stand in for it; set it")
                return
            total = prompt + response
        if prompt is None and response is None:
            prompt = total // 2
            response = total - prompt
        elif prompt is None:
            response = min(response, total - 1)
            prompt = total - response
        elif response is None:
            prompt = min(prompt, total - 1)
            response = total - prompt
        elif prompt + response > total:
            self.refuse("model.max_response_tokens", f"max_prompt_tokens + max_response_tokens ({prompt} + {response}) "
                                                     f"exceed max_model_len ({total})")
        self.put("rollout.max_model_len", total)
        self.put("data.max_prompt_length", prompt)
        self.put("data.max_response_length", response)
        self.put("rollout.max_response_length_in_one_turn", min(response, total - 1))
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
        elif self.backbone == "trinity" and isinstance(per_step, int) and per_step < most * MAX_SAMPLES_PER_EPISODE:
            # astuner pads each explorer step to what it can yield, so that it is one trainer step
            self.refuse("buffer.train_batch_size", f"{per_step} is below what one explorer step can yield (batch_size "
                                                   f"× repeat_times × {MAX_SAMPLES_PER_EPISODE} samples per episode at "
                                                   f"most = {most * MAX_SAMPLES_PER_EPISODE}); remove it")
        if self.given("explorer.runner_per_model"):
            engines = g("explorer.rollout_model.engine_num")
            self.put("rollout.max_env_worker", g("explorer.runner_per_model") * engines * g("algorithm.repeat_times"))
        self.put("rollout.episode_timeout_s", g("explorer.max_timeout"))
        if self.leaves.get("explorer.max_retry_times") == 0:
            self.used.add("explorer.max_retry_times")  # astuner never runs a failed episode again
        self.put("trainer_common.test_freq", g("explorer.eval_interval"))
        self.put("trainer_common.val_before_train", bool(g("explorer.eval_on_startup")))
        save = g("trainer.save_interval")
        self.put("trainer_common.save_freq", save if save > 0 else -1)  # 0: Trinity saves at the end only
        if self.leaves.get("trainer.max_token_len_per_gpu"):
            self.put("trainer_common.max_token_len_per_micro_batch", g("trainer.max_token_len_per_gpu"))
        self.put("trainer_common.max_checkpoints_to_keep", g("trainer.max_checkpoints_to_keep") or None)
        verl = copy.deepcopy(self.leaves.get("trainer.trainer_config") or {})
        actor = (verl.get("actor_rollout_ref") or {}).get("actor") or {}
        if isinstance(actor, dict) and "ppo_epochs" in actor:
            self.put("trainer_common.ppo_epochs", actor.pop("ppo_epochs"))
            self.leaves["trainer.trainer_config"] = _pruned(verl)
        if "monitor_type" not in self.supplied and g("monitor.monitor_type") in MONITORS:
            self.put("trainer_common.logger", ["console", g("monitor.monitor_type")])
        elif "monitor_type" not in self.supplied:
            self.used.discard("monitor.monitor_type")
            self.force.add("monitor.monitor_type")
        ops = self.leaves.get("data_processor.experience_pipeline.operators")
        if ops and all(isinstance(op, dict) and op.get("name") in OPERATORS for op in ops):
            self.put("data_processor.experience_pipeline.operators", g("data_processor.experience_pipeline.operators"))
        if self.backbone != "trinity":
            for path in SYNC_KEYS:  # trained and rolled out in step: what sync_interval 1 asks, however it syncs
                if self.given(path) and not _same(path, self.leaves[path], "fully_async"):
                    self.used.add(path)
                    self.accepted.append(path)

    def _tasksets(self) -> None:
        ei, base = self.explorer_input, "buffer.explorer_input."
        if not isinstance(ei, dict):
            self.refuse(base.rstrip("."), "must be a mapping (taskset, eval_tasksets, ...)")
            ei = {}
        for key in sorted(set(ei) - set(schema.EXPLORER_INPUT)):
            self.unknown.append(base + key)
        for key in ("default_workflow_type", "default_eval_workflow_type"):
            self._workflow_type(base + key, ei.get(key))
        if ei.get("default_reward_fn_type"):
            self.refuse(base + "default_reward_fn_type", "the reward comes from judge_func or the workflow's output")
        train, name = ei.get("taskset"), base + "taskset"
        if ei.get("tasksets"):
            if train or not isinstance(ei["tasksets"], list) or len(ei["tasksets"]) > 1:
                self.refuse(base + "tasksets", "astuner trains on one taskset; merge them into one dataset")
            train, name = ei["tasksets"][0], base + "tasksets[0]"
        t = self._taskset(train or {}, name)
        hf: dict[str, Any] = {}
        if "train_dataset" not in self.supplied:
            if not t.get("path") and (train is None or isinstance(train, dict)):
                self.refuse(name + ".path", "not set; set it to a dataset folder, file or hub id")
            hf = {"dataset_path": t.get("path"), "dataset_name": t.get("subset_name"),
                  "training_split": t.get("split", "train")}
        sel = t.get("task_selector") or t.get("data_selector") or {}
        self.put("task_reader", {"type": "huggingface_dat_repo", "huggingface_dat_repo": hf,
                                 "task_selector": {"selector_type": sel.get("selector_type", "sequential"),
                                                   "seed": sel.get("seed", 42),
                                                   "feature_keys": list(sel.get("feature_keys") or []),
                                                   "kwargs": dict(sel.get("kwargs") or {})}})
        prompt_key = (t.get("format") or {}).get("prompt_key")
        if prompt_key is not None:
            self.put("task_reader.query_field", prompt_key)
        args = t.get("rollout_args") or {}
        for key in ("temperature", "top_p"):
            if args.get(key) is not None:
                self.put(f"rollout.{key}", args[key])
        if args.get("max_tokens") is not None and "rollout" in self.a and "max_model_len" in self.a["rollout"]:
            self.put("rollout.max_response_length_in_one_turn",
                     min(args["max_tokens"], self.a["rollout"]["max_model_len"] - 1))
        repeat = t.get("repeat_times")
        if repeat is not None and repeat != self.get("algorithm.repeat_times") and "algorithm" not in self.supplied:
            self.refuse(name + ".repeat_times", f"{repeat}: Trinity trains with algorithm.repeat_times "
                                                f"({self.get('algorithm.repeat_times')}) instead; set that")
        evals = [] if "eval_dataset" in self.supplied else ei.get("eval_tasksets") or []
        if not isinstance(evals, list) or len(evals) > 1:
            self.refuse(base + "eval_tasksets", "astuner validates on one taskset: a list of one")
            return
        if not evals:
            if "eval_dataset" not in self.supplied:
                hf["validation_split"] = None
                self.put("trainer_common.test_freq", -1)
                self.put("trainer_common.val_before_train", False)
            return
        name = base + "eval_tasksets[0]"
        e = self._taskset(evals[0], name)
        if not e.get("path") and isinstance(evals[0], dict):
            self.refuse(name + ".path", "not set; set it to a dataset folder, file or hub id")
        # what astuner keeps once for training and validation must agree
        if "train_dataset" not in self.supplied and _flat_get(e, "subset_name") != _flat_get(t, "subset_name"):
            self.refuse(name + ".subset_name", "astuner reads validation with the training set's subset_name")
        if _flat_get(e, "format.prompt_key") != _flat_get(t, "format.prompt_key"):
            self.refuse(name + ".format.prompt_key", "astuner reads one query field for training and validation")
        per_call = (e.get("rollout_args") or {}).get("max_tokens")
        rollout = self.a.get("rollout", {})
        if per_call is not None and min(per_call, rollout.get("max_model_len", per_call + 1) - 1) != \
                rollout.get("max_response_length_in_one_turn"):
            self.refuse(name + ".rollout_args.max_tokens", "astuner has one per-call limit, the training taskset's")
        for sel in ("task_selector", "data_selector"):
            if any(_flat_get(e, f"{sel}.{k}") != schema.TASKSET[f"{sel}.{k}"] for k in ("selector_type", "seed")):
                self.refuse(f"{name}.{sel}", "astuner validates on every task, in order")
        hf["validation_split"] = e.get("split", "train")
        if e.get("path") != hf.get("dataset_path"):
            hf["validation_dataset_path"] = e.get("path")
        eargs = e.get("rollout_args") or {}
        self.put("rollout.val_kwargs", {
            # Trinity's eval tasksets sample as the model section says unless their rollout_args do
            "temperature": eargs.get("temperature", self.get("model.temperature")),
            "top_p": eargs.get("top_p", self.get("model.top_p")),
            "num_repeat": e.get("repeat_times", 1)})

    def _taskset(self, ts: Any, name: str) -> dict[str, Any]:
        """A taskset's keys astuner reads; any other key set away from Trinity's default is refused."""
        flat: dict[str, Any] = {}
        self.tasksets.append(name)
        if not isinstance(ts, dict):
            self.refuse(name, "must be a mapping (Trinity's TasksetConfig: path, split, ...)")
            return {}
        sections = {"rollout_args", "task_selector", "data_selector", "format"}
        for key, value in ts.items():
            if key in sections and isinstance(value, dict):
                flat.update({f"{key}.{sub}": v for sub, v in value.items()})
            elif key not in sections or value is not None:
                flat[key] = value
        read = {"path", "split", "subset_name", "name", "repeat_times", "enable_progress_bar",
                "rollout_args.temperature", "rollout_args.top_p", "rollout_args.max_tokens", "format.prompt_key",
                "default_workflow_type"}
        read |= {f"{s}.{k}" for s in ("task_selector", "data_selector") for k in ("selector_type", "seed",
                                                                                    "feature_keys", "kwargs")}
        for key, value in flat.items():
            if key not in schema.TASKSET:
                self.unknown.append(f"{name}.{key}")
            elif key not in read and value != schema.TASKSET[key]:
                self.refuse(f"{name}.{key}", f"{value!r}: {TASKSET_ONLY}")
        self._workflow_type(name + ".default_workflow_type", flat.get("default_workflow_type"))
        out: dict[str, Any] = {}
        for key, value in flat.items():
            if key in read:
                set_path(out, key, value)
        return out

    def _workflow_type(self, path: str, value: Any) -> None:
        if value and not str(value).startswith(WORKFLOW_ADAPTER):
            self.refuse(path, f"{value!r}: tune() trains workflow_func; a Trinity-RFT workflow type cannot run here")

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
            else:
                foreign.append(f"{path}={_short(value)}")
        out.accepted = self.accepted
        if foreign:
            self.problems.append(f"{', '.join(foreign)}: Trinity-RFT settings with no astuner meaning, which the "
                                 f"{self.backbone} backbone cannot honour; remove them, or use backbone=\"trinity\" "
                                 f"(it hands them to Trinity-RFT)")
        return trinity


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


def _flat_get(taskset: dict[str, Any], dotted: str) -> Any:
    node: Any = taskset
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return schema.TASKSET[dotted] if node is None else node


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _close(path: str, known: list[str]) -> str:
    close = difflib.get_close_matches(path, list(known), n=1, cutoff=0.8)
    return f" (did you mean '{close[0]}'?)" if close else ""
