"""The sensor agent as an AgentScope ReActAgent that keeps its own model: `OpenAIChatModel` with a base URL and
an API key (streaming, as AgentScope's default). Nothing here knows about astuner."""

from __future__ import annotations

from typing import Callable

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg, TextBlock
from agentscope.model import OpenAIChatModel
from agentscope.tool import ToolResponse, Toolkit

SYSTEM_PROMPT = "Call read_sensor, then answer in \\boxed{}."


async def solve(question: str, read_sensor: Callable[[], str], base_url: str, api_key: str) -> str:
    def read_sensor_tool() -> ToolResponse:
        """Read the sensor the user asks about."""
        return ToolResponse(content=[TextBlock(type="text", text=read_sensor())])

    read_sensor_tool.__name__ = "read_sensor"
    toolkit = Toolkit()
    toolkit.register_tool_function(read_sensor_tool)
    model = OpenAIChatModel("policy", api_key=api_key, client_kwargs={"base_url": base_url})
    agent = ReActAgent(name="sensor_agent", sys_prompt=SYSTEM_PROMPT, model=model, formatter=OpenAIChatFormatter(),
                       toolkit=toolkit, memory=InMemoryMemory(), max_iters=3)
    agent.set_console_output_enabled(False)
    result = await agent.reply(Msg("user", question, role="user"))
    return result.get_text_content() or ""
