"""The types of the Trinity-RFT values the translation (translator.py) computes with: each is checked
before any arithmetic or comparison, and a wrong one is refused naming its dotted key and the type it must
have (instead of a TypeError deep in the translation, or a product blamed on another key). Values the
translation only copies are checked by astuner's own schema, which names the Trinity key they came from.
Also the small helpers the translation's modules share."""

from __future__ import annotations

import math
from typing import Any, Optional

# dotted key -> "kind[>=least][|null]": kind int, number, str, bool, mapping or list; null where the
# translation reads None as "not set" (or Trinity's default is None)
CONFIG = {
    "cluster.node_num": "int>=0", "cluster.gpu_per_node": "int>=0",
    "checkpoint_root_dir": "str|null", "group": "str|null", "continue_from_checkpoint": "bool",
    "algorithm.algorithm_type": "str|null", "algorithm.repeat_times": "int>=1",
    "algorithm.optimizer.lr_warmup_steps": "int", "algorithm.optimizer.lr_warmup_steps_ratio": "number>=0",
    "algorithm.optimizer.clip_grad": "number>=0", "trainer.grad_clip": "number>=0",
    "algorithm.loss_agg_mode": "str|null", "algorithm.policy_loss_fn_args.loss_agg_mode": "str",
    "algorithm.policy_loss_fn": "str|null", "algorithm.kl_loss_fn": "str|null",
    "algorithm.entropy_loss_fn": "str|null", "algorithm.advantage_fn": "str|null",
    "algorithm.kl_penalty_fn": "str|null", "algorithm.sample_strategy": "str|null",
    "model.max_model_len": "int>=1|null", "model.max_prompt_tokens": "int>=1|null",
    "model.max_response_tokens": "int>=1|null",
    "explorer.runner_per_model": "int>=1", "explorer.rollout_model.engine_num": "int>=1",
    "explorer.rollout_model.extra_engine_args": "mapping|null", "explorer.eval_on_startup": "bool",
    "buffer.batch_size": "int>=1", "buffer.train_batch_size": "int>=0",
    "buffer.total_steps": "int>=0|null", "trainer.total_steps": "int>=0|null",
    "trainer.save_interval": "int>=0", "trainer.trainer_config": "mapping|null",
    "monitor.monitor_type": "str", "data_processor.experience_pipeline.operators": "list|null",
}
# a taskset's keys (buffer.explorer_input.taskset, eval_tasksets[0], ...)
TASKSET = {
    "repeat_times": "int>=1", "rollout_args.max_tokens": "int>=1|null",
    **{f"{s}.{k}": spec for s in ("task_selector", "data_selector")
       for k, spec in (("selector_type", "str"), ("seed", "int"), ("feature_keys", "list|null"),
                       ("kwargs", "mapping|null"))},
    "workflow_args": "mapping|null",
}

_KINDS = {"int": "an integer", "number": "a finite number", "str": "a string", "bool": "true or false",
          "mapping": "a mapping", "list": "a list"}
_GOT = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a mapping",
        list: "a list"}


def problem(value: Any, spec: str) -> Optional[str]:
    """Why `value` is not what `spec` ("int>=1|null", ...) asks, or None."""
    main, _, null = spec.partition("|")
    kind, _, least = main.partition(">=")
    if value is None and null:
        return None
    if value is None:
        ok = False
    elif kind in ("int", "number"):
        ok = isinstance(value, (int, float) if kind == "number" else int) and not isinstance(value, bool)
        ok = ok and math.isfinite(value) and (not least or value >= float(least))  # nan, inf: no setting
    else:
        ok = isinstance(value, {"str": str, "bool": bool, "mapping": dict, "list": list}[kind])
    if ok:
        return None
    want = _KINDS[kind] + (f" >= {least}" if least else "") + (" or null" if null else "")
    got = "null" if value is None else f"{short(value)} ({_GOT.get(type(value), type(value).__name__)})"
    return f"must be {want}, got {got}"


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
