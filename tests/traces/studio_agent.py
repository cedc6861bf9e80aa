"""An agent in use under AgentScope Studio's tracing, for the tests: AgentScope's `ReActAgent` with its own
`OpenAIChatModel` and the `read_sensor` tool, traced by `agentscope.init(tracing_url=...)` (AgentScope's OTLP
exporter). It answers one question per reading given, each reply a trace; `--broken` adds one reply whose model
call fails. A process of its own: AgentScope's tracing sets the process's OpenTelemetry tracer provider once.

    python tests/traces/studio_agent.py TRACING_URL BASE_URL KEY READING [READING ...] [--broken]
"""

from __future__ import annotations

import asyncio
import sys


async def main(tracing_url: str, base_url: str, key: str, readings: list[str], broken: bool) -> None:
    import agentscope
    from agentscope.agent import ReActAgent
    from agentscope.formatter import OpenAIChatFormatter
    from agentscope.memory import InMemoryMemory
    from agentscope.message import Msg, TextBlock
    from agentscope.model import OpenAIChatModel
    from agentscope.tool import ToolResponse, Toolkit
    from opentelemetry import trace

    agentscope.init(project="sensor", name="in-use", tracing_url=tracing_url)

    def agent(model: str, reading: str) -> ReActAgent:
        def read_sensor() -> ToolResponse:
            """Read the sensor the user asks about."""
            return ToolResponse(content=[TextBlock(type="text", text=reading)])

        toolkit = Toolkit()
        toolkit.register_tool_function(read_sensor)
        chat = OpenAIChatModel(model_name=model, api_key=key, stream=False,
                               client_kwargs={"base_url": base_url, "max_retries": 0})
        out = ReActAgent(name="sensor_agent", sys_prompt="Call read_sensor, then answer in \\boxed{}.", model=chat,
                         formatter=OpenAIChatFormatter(), toolkit=toolkit, memory=InMemoryMemory(), max_iters=3)
        out.set_console_output_enabled(False)
        return out

    for reading in readings:
        reply = await agent("careful", reading).reply(Msg("user", "What does sensor S1 read?", role="user"))
        print(reply.get_text_content())
    if broken:
        try:
            await agent("broken", "000").reply(Msg("user", "What does sensor S2 read?", role="user"))
        except Exception as exc:  # noqa: BLE001 - the failed call is what this reply is for
            print(f"broken: {type(exc).__name__}")
    trace.get_tracer_provider().force_flush()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--broken"]
    asyncio.run(main(args[0], args[1], args[2], args[3:], "--broken" in sys.argv))
