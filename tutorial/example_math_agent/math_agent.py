"""A ReAct math agent with a Python tool, trained on GSM8K (the user contract's example)."""

from __future__ import annotations

from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.tool import Toolkit

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask
from astuner.tools import execute_python_code

SYSTEM_PROMPT = (
    "You are an agent that solves math word problems. You may call execute_python_code to calculate "
    "(print what you need to see). When you know the answer, reply with it in \\boxed{}, e.g. \\boxed{42}."
)


def extract_final_answer(result: Msg) -> str:
    """The text of the agent's final message; the judge looks for the last \\boxed{...} in it."""
    return result.get_text_content() or ""


class MathAgentWorkflow(Workflow):
    name: str = "math_agent_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        toolkit = Toolkit()
        toolkit.register_tool_function(execute_python_code)
        agent = ReActAgent(name="math_react_agent", sys_prompt=SYSTEM_PROMPT, model=model_tuner,
                           formatter=DashScopeChatFormatter(), toolkit=toolkit, memory=InMemoryMemory(), max_iters=2)
        agent.set_console_output_enabled(False)
        result = await agent.reply(Msg("user", workflow_task.task.main_query, role="user"))
        return WorkflowOutput(reward=None, metadata={"final_answer": extract_final_answer(result)})
