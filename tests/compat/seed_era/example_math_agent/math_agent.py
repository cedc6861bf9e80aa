"""A workflow of the seed system's era: a ReActAgent with a Python tool, wrapped as its tutorials wrap it."""

from agentscope.message import Msg

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

system_prompt = "Solve the math problem. You may run Python code. Put your final answer in \\boxed{}."


class ExampleMathLearn(Workflow):
    name: str = "math_agent_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        from agentscope.agent import ReActAgent
        from agentscope.formatter import DashScopeChatFormatter
        from agentscope.memory import InMemoryMemory
        from agentscope.tool import Toolkit, execute_python_code

        self.toolkit = Toolkit()
        self.toolkit.register_tool_function(execute_python_code)
        self.agent = ReActAgent(name="math_react_agent", sys_prompt=system_prompt, model=model_tuner,
                                formatter=DashScopeChatFormatter(), toolkit=self.toolkit, memory=InMemoryMemory(),
                                max_iters=2)
        self.agent.set_console_output_enabled(False)
        result = await self.agent.reply(Msg("user", workflow_task.task.main_query, role="user"))
        return WorkflowOutput(reward=None, metadata={"final_answer": str(result.content)})
