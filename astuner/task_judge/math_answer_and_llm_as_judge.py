"""`MathAnswerAndLlmAsJudge`: the math rule first; when it says no, ask an auxiliary model.

The model asked is `astuner.task_judge.llm_judge.auxiliary_model`, an `astuner.auxiliary_models` entry by name
(a folder the backbone serves, or an endpoint), or else any OpenAI-compatible chat endpoint configured there
(base_url, model, api_key_env); nothing vendor-specific is built in.
"""

from __future__ import annotations

import os
import re
from typing import Any

from astuner.schema import JudgeOutput, WorkflowOutput, WorkflowTask
from astuner.schema.task import NoGroundTruth, fields_of
from astuner.task_judge.base import BaseJudge
from astuner.task_judge.math_answer import answers_match, extract_answer, ground_truth_of

PROMPT = """You check answers to math problems.
Problem: {question}
Reference answer: {reference}
Answer to check: {answer}
Is the answer to check mathematically equivalent to the reference answer? Reply with YES or NO only."""


class MathAnswerAndLlmAsJudge(BaseJudge):
    def __init__(self, config: Any = None):
        super().__init__(config)
        llm = config.task_judge.llm_judge if config is not None else None
        self.auxiliary = llm.auxiliary_model if llm is not None else None
        if self.auxiliary:  # asked through the episode's auxiliary models (workflow_task.auxiliary_models)
            return
        if llm is None or not llm.base_url or not llm.model:
            raise ValueError("MathAnswerAndLlmAsJudge needs astuner.task_judge.llm_judge.auxiliary_model, or its "
                             ".base_url and .model")
        from openai import AsyncOpenAI

        api_key = os.environ.get(llm.api_key_env, "") if llm.api_key_env else ""
        self.model = llm.model
        self.client = AsyncOpenAI(base_url=llm.base_url, api_key=api_key or "EMPTY", timeout=llm.timeout_s,
                                  max_retries=1)

    async def compute_reward(self, workflow_task: WorkflowTask, workflow_output: WorkflowOutput) -> JudgeOutput:
        reference = ground_truth_of(workflow_task.task.metadata)
        if reference is None:
            raise NoGroundTruth(f"task {workflow_task.task_id} has no ground truth ('answer' or 'ground_truth' field; "
                                f"it has {fields_of(workflow_task.task.metadata)})", workflow_task.task_id)
        final = workflow_output.metadata.get("final_answer")
        predicted = extract_answer(final)
        if predicted is not None and answers_match(predicted, reference):
            return JudgeOutput(reward=1.0, is_success=True, metrics={"judge/llm_called": 0.0})
        if not final:
            return JudgeOutput(reward=0.0, is_success=False, metrics={"judge/llm_called": 0.0})
        messages = [{"role": "user", "content": PROMPT.format(question=workflow_task.task.main_query,
                                                               reference=reference,
                                                               answer=predicted or str(final)[-2000:])}]
        if self.auxiliary:
            verdict = await ask_auxiliary(workflow_task.auxiliary_models[self.auxiliary], messages)
        else:
            reply = await self.client.chat.completions.create(model=self.model, temperature=0.0, max_tokens=8,
                                                              messages=messages)
            verdict = reply.choices[0].message.content or ""
        verdict = verdict.strip().upper()
        correct = re.match(r"^\W*YES\b", verdict) is not None
        return JudgeOutput(reward=1.0 if correct else 0.0, is_success=correct, metrics={"judge/llm_called": 1.0})


async def ask_auxiliary(model: Any, messages: list[dict[str, Any]]) -> str:
    """The text of an AgentScope chat model's reply to `messages` (its text blocks, joined)."""
    reply = await model(messages)
    return "".join(block.get("text", "") for block in reply.content if block.get("type") == "text")
