"""The tool-using CPU example's agent: an AgentScope ReActAgent that must call the `add` tool to answer.

Each episode is at least two model calls: the agent calls `add(a, b)`, reads the tool's result in its
context, and answers in \\boxed{}; MathAnswerAsJudge scores the answer.
"""

from __future__ import annotations

import re

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.tool import ToolResponse, Toolkit

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

SYSTEM_PROMPT = "Call add, then answer in \\boxed{}."


def add(a: int, b: int) -> ToolResponse:
    """Add two integers.

    Args:
        a (int): The first number.
        b (int): The second number.
    """
    from agentscope.message import TextBlock

    return ToolResponse(content=[TextBlock(type="text", text=str(int(a) + int(b)))])


class CalcWorkflow(Workflow):
    name: str = "calc_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        toolkit = Toolkit()
        toolkit.register_tool_function(add)
        agent = ReActAgent(name="calc_agent", sys_prompt=SYSTEM_PROMPT, model=model_tuner,
                           formatter=OpenAIChatFormatter(), toolkit=toolkit, memory=InMemoryMemory(), max_iters=3)
        agent.set_console_output_enabled(False)
        result = await agent.reply(Msg("user", workflow_task.task.main_query, role="user"))
        return WorkflowOutput(reward=None, metadata={"final_answer": result.get_text_content() or ""})


async def expert(prompt: str) -> str:
    """The SFT warm start's expert (trainer_common.sft.expert): call `add` with the question's numbers, then
    answer with the tool's result in \\boxed{}. It reads the rendered prompt, as the model will."""
    results = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", prompt, re.S)
    if results:
        return f"\\boxed{{{results[-1]}}}"
    a, b = re.findall(r"What is (\d+) \+ (\d+)", prompt)[-1]
    return '<tool_call>\n{"name": "add", "arguments": {"a": %s, "b": %s}}\n</tool_call>' % (a, b)

