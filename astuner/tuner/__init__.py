"""The trainable model (`ModelTuner`, in `astuner.model.model_tuner`) and the function API:

    from astuner.tuner import tune, DatasetConfig, TunerModelConfig, AlgorithmConfig, WorkflowOutput, JudgeOutput
    from astuner.tuner.model_selection import select_model   # agentscope.tuner's model selection (also here)

`TunerChatModel`, `Algorithm` and `Dataset` are the names other agentscope.tuner releases give the same three (its
samples import them), kept as aliases.
"""

from astuner.schema import JudgeOutput, WorkflowOutput
from astuner.api import AlgorithmConfig, DatasetConfig, TunerModelConfig, tune
from astuner.tuner.model_selection import select_model

TunerChatModel, Algorithm, Dataset = TunerModelConfig, AlgorithmConfig, DatasetConfig

__all__ = ["tune", "DatasetConfig", "TunerModelConfig", "AlgorithmConfig", "WorkflowOutput", "JudgeOutput",
           "TunerChatModel", "Algorithm", "Dataset", "select_model"]
