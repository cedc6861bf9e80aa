"""The trainable model (`ModelTuner`, in `astuner.model.model_tuner`) and the function API:

    from astuner.tuner import tune, DatasetConfig, TunerModelConfig, AlgorithmConfig, WorkflowOutput, JudgeOutput
    from astuner.tuner.model_selection import select_model   # agentscope.tuner's model selection (also here)

Every name agentscope.tuner exports is here with its meaning: `WorkflowType`, `JudgeType`,
`check_workflow_function`, `check_judge_function` (astuner.tuner.signatures); `TinkerConfig` (training on Tinker's
hosted service: tune() refuses a model that sets it, naming astuner's LoRA keys); `tune_prompt` and
`PromptTuneConfig` (DSPy prompt optimisation: refused in one line, with the reason and what to use).

`TunerChatModel`, `Algorithm` and `Dataset` are the names other agentscope.tuner releases give the same three (its
samples import them), kept as aliases.
"""

from astuner.schema import JudgeOutput, WorkflowOutput
from astuner.api import AlgorithmConfig, DatasetConfig, TinkerConfig, TunerModelConfig, tune
from astuner.tuner.model_selection import select_model
from astuner.tuner.prompt_tuning import PromptTuneConfig, tune_prompt
from astuner.tuner.signatures import JudgeType, WorkflowType, check_judge_function, check_workflow_function

TunerChatModel, Algorithm, Dataset = TunerModelConfig, AlgorithmConfig, DatasetConfig

__all__ = ["tune", "DatasetConfig", "TunerModelConfig", "AlgorithmConfig", "WorkflowOutput", "JudgeOutput",
           "TunerChatModel", "Algorithm", "Dataset", "select_model", "TinkerConfig", "WorkflowType", "JudgeType",
           "check_workflow_function", "check_judge_function", "tune_prompt", "PromptTuneConfig"]
