"""The tool-using CPU example's agent with episodes that yield 0, 1 or 2 training samples, for the backbones'
end-to-end tests: tasks whose number is a multiple of 3 fail on their row (they read a field their rows lack: no
sample, and the run names those tasks at its end), those one past a multiple of 3 first ask the model an unrelated
question (a second context, so a second sample), the rest run as written; with an auxiliary model named
`referee` (astuner.auxiliary_models), those two past a multiple of 3 first ask it whether the question is about
numbers (a frozen second agent: its reply is never trained on). Where `ASTUNER_TEST_CLAIMS` names a folder, the
first episode to start in the backbone's workers (a Ray actor: not a warm start's, in the driver) on a task that
does not fail on its row raises (a crash: with rollout.episode_retries 0 its group is short of it). `RowlessWorkflow`:
every task fails on its row."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tutorial" / "example_tool_cpu"))
from calc_agent import CalcWorkflow  # noqa: E402


def task_number(task_id: str) -> int:
    return int(task_id.rsplit("-", 1)[-1])


class UnevenWorkflow(CalcWorkflow):
    async def execute(self, workflow_task, model_tuner):
        number = task_number(workflow_task.task.task_id)
        if number % 3 == 0:
            return workflow_task.task.metadata["environment_url"]  # not in the row: MissingField
        claims = os.environ.get("ASTUNER_TEST_CLAIMS")
        if claims and in_backbone_worker() and first_to_claim(Path(claims) / "crash"):
            raise RuntimeError("the first episode in the backbone's workers crashes")
        if number % 3 == 1:
            await model_tuner([{"role": "user", "content": "Name a number."}])
        referee = workflow_task.auxiliary_models.get("referee")
        if number % 3 == 2 and referee is not None:
            reply = await referee([{"role": "user", "content": f"Is this about numbers? {workflow_task.task.main_query}"}])
            assert reply.content, "the referee gave no reply"
        return await super().execute(workflow_task, model_tuner)


def in_backbone_worker() -> bool:
    """In a Ray actor: Trinity's workflow runners, verl's agent-loop workers (not the driver)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def first_to_claim(path: Path) -> bool:
    """True for the one caller (over every process of the run) that creates `path`."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class RowlessWorkflow(CalcWorkflow):
    async def execute(self, workflow_task, model_tuner):
        return workflow_task.task.metadata["environment_url"]
