"""The README's main job: an AgentScope ReActAgent that must use a tool to answer.

Each task asks what one sensor reads. The reading is not in the question: only the environment's
`read_sensor` tool reports it, so the agent has to call the tool, read the result in its context and
answer in \\boxed{} — two model calls per episode with the tool's result in between. A random policy
almost never names the reading (100-999); `MathAnswerAsJudge` scores the answer.

`expert` plays the task perfectly; the SFT warm start (`trainer_common.sft`) learns the tool protocol
from its episodes, and GRPO then improves the agent: calling the tool every time, copying its result, a
well-formed answer.
"""

from __future__ import annotations

import re

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg, TextBlock
from agentscope.tool import ToolResponse, Toolkit

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

SYSTEM_PROMPT = "Call read_sensor, then answer in \\boxed{}."


class SensorWorkflow(Workflow):
    name: str = "sensor_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        reading = workflow_task.task.metadata["reading"]

        def read_sensor() -> ToolResponse:
            """Read the sensor the user asks about."""
            return ToolResponse(content=[TextBlock(type="text", text=str(reading))])

        toolkit = Toolkit()
        toolkit.register_tool_function(read_sensor)
        agent = ReActAgent(name="sensor_agent", sys_prompt=SYSTEM_PROMPT, model=model_tuner,
                           formatter=OpenAIChatFormatter(), toolkit=toolkit, memory=InMemoryMemory(), max_iters=3)
        agent.set_console_output_enabled(False)
        result = await agent.reply(Msg("user", workflow_task.task.main_query, role="user"))
        return WorkflowOutput(reward=None, metadata={"final_answer": result.get_text_content() or ""})


async def expert(prompt: str) -> str:
    """The SFT warm start's expert (trainer_common.sft.expert): call the tool, then answer with its result."""
    results = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", prompt, re.S)
    if results:
        return f"\\boxed{{{results[-1]}}}"
    return '<tool_call>\n{"name": "read_sensor", "arguments": {}}\n</tool_call>'
