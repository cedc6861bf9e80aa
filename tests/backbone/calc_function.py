"""The tool-using CPU example (tutorial/example_tool_cpu) written for the function API: `python
tests/backbone/calc_function.py CONFIG BACKBONE NAME [REFEREE]` tunes `calc_function` with `astuner.tuner.tune(
config_path=CONFIG, backbone=BACKBONE, experiment_name=NAME)` in the current folder; with REFEREE (a model folder),
also `auxiliary_models={"referee": TunerModelConfig(REFEREE, ...)}`: a second ReActAgent on that frozen model
answers after the trained one (agentscope-samples' werewolves shape). Used by the backbones' end-to-end tests."""

from __future__ import annotations

import sys
from pathlib import Path

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.tool import Toolkit

from astuner.tuner import TunerModelConfig, WorkflowOutput, tune

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tutorial" / "example_tool_cpu"))
from calc_agent import SYSTEM_PROMPT, add  # noqa: E402


async def calc_function(task: dict, model, auxiliary_models=None) -> WorkflowOutput:
    toolkit = Toolkit()
    toolkit.register_tool_function(add)
    agent = ReActAgent(name="calc_agent", sys_prompt=SYSTEM_PROMPT, model=model, formatter=OpenAIChatFormatter(),
                       toolkit=toolkit, memory=InMemoryMemory(), max_iters=3)
    agent.set_console_output_enabled(False)
    msg = await agent.reply(Msg("user", task["question"], role="user"))
    metrics = {}
    if auxiliary_models and "referee" in auxiliary_models:
        referee = ReActAgent(name="referee", sys_prompt="You judge sums.", model=auxiliary_models["referee"],
                             formatter=OpenAIChatFormatter(), memory=InMemoryMemory(), max_iters=1)
        referee.set_console_output_enabled(False)
        verdict = await referee.reply(Msg("calc_agent", msg.get_text_content() or "", role="user"))
        metrics["referee_replied"] = float(verdict is not None)
    return WorkflowOutput(response=msg, metadata={"final_answer": msg.get_text_content() or ""}, metrics=metrics)


if __name__ == "__main__":
    conf, backbone, name = sys.argv[1:4]
    referee = {"referee": TunerModelConfig(model_path=sys.argv[4], max_model_len=1024, max_tokens=16)} \
        if len(sys.argv) > 4 else None
    print(tune(workflow_func=calc_function, config_path=conf, backbone=backbone, experiment_name=name,
               auxiliary_models=referee))
