"""agentscope.tuner's prompt tuning (`tune_prompt`, `PromptTuneConfig`): it optimises an agent's system prompt
with DSPy, leaving the model's weights as they are. astuner trains the weights by RL and does not search prompts;
both names are refused in one line, saying so and what to use: agentscope's own `tune_prompt` (it needs `dspy`)
on the same workflow and judge, then `astuner eval` to compare the prompts, or astuner to train the weights."""

from __future__ import annotations

from typing import Any

from astuner.errors import UserError

WHY = ("agentscope.tuner.tune_prompt optimises the agent's system prompt with DSPy; astuner trains the model's "
       "weights by RL and does not search prompts: run agentscope's own tune_prompt (pip install dspy) on the same "
       "workflow and judge, then compare the prompts with `astuner eval`, or train the weights with "
       "astuner.tuner.tune")


def tune_prompt(*args: Any, **kwargs: Any) -> Any:
    raise UserError(f"astuner.tuner.tune_prompt: {WHY}")


class PromptTuneConfig:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UserError(f"astuner.tuner.PromptTuneConfig: {WHY}")
