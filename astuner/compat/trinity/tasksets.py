"""The tasksets' part of the translation of a Trinity-RFT config (`buffer.explorer_input`): the training taskset
becomes astuner's task reader, one eval taskset its validation split (translator.py runs it)."""

from __future__ import annotations

from typing import Any

from astuner.compat.trinity import schema
from astuner.compat.trinity import values
from astuner.compat.trinity.config import TASKSET_ONLY, WORKFLOW_ADAPTER
from astuner.config.keys import set_path

# a taskset's keys the translation reads
READ = {"path", "split", "subset_name", "name", "repeat_times", "enable_progress_bar", "rollout_args.temperature",
        "rollout_args.top_p", "rollout_args.max_tokens", "format.prompt_key", "default_workflow_type",
        "workflow_args"} | {
    f"{s}.{k}" for s in ("task_selector", "data_selector") for k in ("selector_type", "seed", "feature_keys", "kwargs")}
# a taskset's keys Trinity's own workflows and reward functions read, which tune()'s functions replace: the
# workflow and judge receive the whole task row (as agentscope.tuner's adapter hands it to them)
UNREAD = {"format.response_key": "workflow_func and judge_func receive the whole task row and read the answer "
                                 "from it (astuner's judge replaces Trinity's reward functions)"}


class Tasksets:
    """The methods of `trinity_translator.Translator` that translate `buffer.explorer_input` (with its
    `refuse`, `put`, `get` and the attributes below)."""

    explorer_input: Any
    supplied: set[str]
    a: dict[str, Any]
    unknown: list[str]
    tasksets: list[str]
    ignored: dict[str, str]

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
            several = ei["tasksets"]
            if train or not isinstance(several, list) or len(several) > 1:
                self.refuse(base + "tasksets", "astuner trains on one taskset; merge them into one dataset")
            if isinstance(several, list):
                train, name = several[0], base + "tasksets[0]"
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
        if t.get("workflow_args"):  # handed to the workflow: workflow_task.workflow_args, task["workflow_args"]
            self.put("rollout.workflow_args", dict(t["workflow_args"]))
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
        self._eval_taskset(evals[0], base + "eval_tasksets[0]", t, hf)

    def _eval_taskset(self, taskset: Any, name: str, t: dict[str, Any], hf: dict[str, Any]) -> None:
        e = self._taskset(taskset, name)
        if not e.get("path") and isinstance(taskset, dict):
            self.refuse(name + ".path", "not set; set it to a dataset folder, file or hub id")
        # what astuner keeps once for training and validation must agree
        if "train_dataset" not in self.supplied and _flat_get(e, "subset_name") != _flat_get(t, "subset_name"):
            self.refuse(name + ".subset_name", "astuner reads validation with the training set's subset_name")
        if _flat_get(e, "format.prompt_key") != _flat_get(t, "format.prompt_key"):
            self.refuse(name + ".format.prompt_key", "astuner reads one query field for training and validation")
        if (e.get("workflow_args") or {}) != (t.get("workflow_args") or {}):
            self.refuse(name + ".workflow_args", "astuner hands one workflow_args to the workflow, the training "
                                                 "taskset's; make them the same")
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
        """A taskset's keys astuner reads; any other key set away from Trinity's default is refused (those
        tune()'s functions replace excepted: logged)."""
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
        for key, spec in values.TASKSET.items():
            why = values.problem(flat[key], spec) if key in flat else None
            if why:
                self.refuse(f"{name}.{key}", why)
                del flat[key]
        for key, value in flat.items():
            if key not in schema.TASKSET:
                self.unknown.append(f"{name}.{key}")
            elif key in UNREAD and value != schema.TASKSET[key]:
                self.ignored[f"{name}.{key}"] = UNREAD[key]
            elif key not in READ and value != schema.TASKSET[key]:
                self.refuse(f"{name}.{key}", f"{value!r}: {TASKSET_ONLY}")
        self._workflow_type(name + ".default_workflow_type", flat.get("default_workflow_type"))
        out: dict[str, Any] = {}
        for key, value in flat.items():
            if key in READ:
                set_path(out, key, value)
        return out

    def _workflow_type(self, path: str, value: Any) -> None:
        if value and not str(value).startswith(WORKFLOW_ADAPTER):
            self.refuse(path, f"{value!r}: tune() trains workflow_func; a Trinity-RFT workflow type cannot run here")


def _flat_get(taskset: dict[str, Any], dotted: str) -> Any:
    node: Any = taskset
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return schema.TASKSET[dotted] if node is None else node
