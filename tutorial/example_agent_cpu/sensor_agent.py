"""The README's main job: an AgentScope ReActAgent that must use a tool to answer.

Each task asks what one sensor reads. The reading is not in the question: only the environment's
`read_sensor` tool reports it, so the agent has to call the tool, read the result in its context and
answer in \\boxed{} — two model calls per episode with the tool's result in between. A random policy
almost never names the reading (100-999); `MathAnswerAsJudge` scores the answer.

`expert` plays the task as a sloppy operator would: it always calls the tool, but copies the reading right only
half of the time (otherwise it transposes two digits). The SFT warm start (`trainer_common.sft`) imitates all of
its episodes, so the warm-started agent uses the tool and miscopies as often as its teacher; GRPO, rewarded by
the judge, then makes it copy exactly — the student beats its teacher.
"""

from __future__ import annotations

import re
import zlib

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg, TextBlock
from agentscope.tool import ToolResponse, Toolkit

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

SYSTEM_PROMPT = "Call read_sensor, then answer in \\boxed{}."


class SensorWorkflow(Workflow):
    name: str = "sensor_workflow"

    def toolkit(self, workflow_task: WorkflowTask) -> Toolkit:
        return sensor_toolkit(workflow_task.task.metadata["reading"])

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        agent = ReActAgent(name="sensor_agent", sys_prompt=SYSTEM_PROMPT, model=model_tuner,
                           formatter=OpenAIChatFormatter(), toolkit=self.toolkit(workflow_task),
                           memory=InMemoryMemory(), max_iters=3)
        agent.set_console_output_enabled(False)
        result = await agent.reply(Msg("user", workflow_task.task.main_query, role="user"))
        return WorkflowOutput(reward=None, metadata={"final_answer": result.get_text_content() or ""})


def sensor_toolkit(reading: int) -> Toolkit:
    """The episode's one tool, `read_sensor`, which reports `reading`. Its schema, as the model sees it, is in
    tools.json (for `astuner chat --tools`)."""

    def read_sensor() -> ToolResponse:
        """Read the sensor the user asks about."""
        return ToolResponse(content=[TextBlock(type="text", text=str(reading))])

    toolkit = Toolkit()
    toolkit.register_tool_function(read_sensor)
    return toolkit


EXPERT_ACCURACY = 0.5  # the share of readings the expert copies right


async def expert(prompt: str) -> str:
    """The SFT warm start's expert (trainer_common.sft.expert): it calls the tool, then answers — but copies the
    reading right only half of the time; otherwise it transposes its digits (497 -> 479), like logged
    demonstrations of a sloppy operator. The warm start imitates it, mistakes included (sft.min_reward 0 keeps
    every episode); GRPO, rewarded by the judge, has to do better than its teacher."""
    return _play(prompt, EXPERT_ACCURACY)


async def careful_expert(prompt: str) -> str:
    """An expert that always copies the reading right (tutorial/example_openai_agent warm-starts on it)."""
    return _play(prompt, 1.0)


def _play(prompt: str, accuracy: float) -> str:
    results = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", prompt, re.S)
    if not results:
        return '<tool_call>\n{"name": "read_sensor", "arguments": {}}\n</tool_call>'
    reading = results[-1]
    draw = zlib.crc32(reading.encode()) % 1000 / 1000  # deterministic per reading: the same demonstrations each run
    if draw < accuracy or not reading.isdigit():
        return f"\\boxed{{{reading}}}"
    return f"\\boxed{{{transposed(reading)}}}"


def transposed(reading: str) -> str:
    """`reading` with two neighbouring digits swapped (the first pair that differs); 777 becomes 778."""
    for i in range(len(reading) - 1):
        if reading[i] != reading[i + 1]:
            return reading[:i] + reading[i + 1] + reading[i] + reading[i + 2:]
    return reading[:-1] + str((int(reading[-1]) + 1) % 10)
