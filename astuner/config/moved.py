"""Where the modules a user's file may import from the seed system (ASTuner, before its rename to AgentJet) or from
astuner's older layout went. The ones that kept a thin re-export (`astuner.workflow`, `astuner.task_judge.base_judge`,
`astuner.task_judge.env_service_as_judge`, `astuner.task_rollout.dashscope_llm_bridge`, `astuner.tiny_model`) import
as they did; for the others a plug-in that imports them is told what to use instead, not to install astuner."""

from __future__ import annotations

from typing import Optional

# module (or package: its modules too) -> what to use now; the longest match wins
MOVED = {
    "astuner.utils.robust_dashscope": "agentscope's DashScopeChatModel (agentscope.model) for a hosted model; the "
                                      "trained agent takes model_tuner",
    "astuner.utils": "the seed system's helpers have no astuner module; their uses have astuner names "
                     "(docs/migration.md)",
    "astuner.task_judge.rm_auto_grader_judge": "astuner has no rubrics auto-grader: write a judge (astuner.task_judge."
                                               "base_judge.BaseJudge) or ask an LLM with task_judge.llm_judge",
    "astuner.task_rollout": "episodes run in astuner.rollout.manager; a judge asks an LLM through task_judge.llm_judge "
                            "(create_external_llm_fn: astuner.task_rollout.dashscope_llm_bridge)",
    "astuner.task_runner": "a workflow is astuner.Workflow (execute(workflow_task, model_tuner)) or an async function",
    "astuner.context_tracker": "astuner.rollout's context tracker splits an episode's calls by prefix; there is "
                               "no tracker to choose",
    "astuner.backbone.main_trinity": "run with astuner --backbone trinity --with-ray",
    "astuner.backbone.main_verl": "run with astuner --backbone verl --with-ray",
    "astuner.backbone.main_vllm": "run with astuner --backbone debug",
    "astuner.cli.launcher": "run with astuner --conf FILE",
    "astuner.data_generator": "astuner does not generate tasks; read them with task_reader",
    "astuner.task_reader.jsonl_reader": "task_reader.type dataset_file (astuner.task_reader)",
    "astuner.task_reader.hf_dataset_reader": "task_reader.type huggingface_dat_repo (astuner.task_reader)",
    "astuner.task_reader.env_service_reader": "task_reader.type env_service (astuner.task_reader)",
    "astuner.schema.trajectory": "astuner.schema (Sample, WorkflowOutput)",
}


def moved(module: str) -> Optional[str]:
    """What to use instead of `module`, an astuner module that does not exist; None for any other module."""
    if module != "astuner" and not module.startswith("astuner."):
        return None
    match = max((name for name in MOVED if module == name or module.startswith(name + ".")), key=len, default=None)
    return MOVED[match] if match else "see docs/migration.md for the names astuner has now"
