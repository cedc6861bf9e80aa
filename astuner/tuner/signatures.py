"""agentscope.tuner's names for a workflow function and a judge function: the types and their signature checks,
with agentscope's meaning (a workflow takes `task` and `model`, a judge `task` and `response`; either may take
`auxiliary_models` and `logger`; no `*args`/`**kwargs`, nothing else). `tune()` checks the functions it is given
itself (astuner.api); these let code written against agentscope.tuner check its own first."""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

from astuner.schema import JudgeOutput, WorkflowOutput

WorkflowType = Callable[..., Awaitable[WorkflowOutput]]
JudgeType = Callable[..., Awaitable[JudgeOutput]]

OPTIONAL = ("auxiliary_models", "logger")


def _check(func: Callable[..., Any], essential: tuple[str, ...]) -> None:
    """ValueError naming what `func`'s signature lacks or has beyond `essential` and OPTIONAL."""
    names = []
    for name, param in inspect.signature(func).parameters.items():
        if param.kind == param.VAR_POSITIONAL:
            raise ValueError(f"{func.__name__} may not take *{name}: name its parameters")
        if param.kind == param.VAR_KEYWORD:
            raise ValueError(f"{func.__name__} may not take **{name}: name its parameters")
        names.append(name)
    missing = sorted(set(essential) - set(names))
    if missing:
        raise ValueError(f"{func.__name__} lacks the parameter(s) {', '.join(missing)}")
    unknown = sorted(set(names) - set(essential) - set(OPTIONAL))
    if unknown:
        raise ValueError(f"{func.__name__} takes {', '.join(unknown)}, which it is never given (it is given "
                         f"{', '.join((*essential, *OPTIONAL))})")


def check_workflow_function(func: Callable[..., Any]) -> None:
    """Whether `func` is a WorkflowType: (task, model, [auxiliary_models], [logger]); ValueError otherwise."""
    _check(func, ("task", "model"))


def check_judge_function(func: Callable[..., Any]) -> None:
    """Whether `func` is a JudgeType: (task, response, [auxiliary_models], [logger]); ValueError otherwise."""
    _check(func, ("task", "response"))
