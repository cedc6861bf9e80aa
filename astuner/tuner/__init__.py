"""The trainable model (`ModelTuner`, in `astuner.model.model_tuner`) and the function API:

    from astuner.tuner import tune, DatasetConfig, TunerModelConfig, AlgorithmConfig, WorkflowOutput, JudgeOutput

`TunerChatModel`, `Algorithm` and `Dataset` are the names other agentscope.tuner releases give the same three (its
samples import them), kept as aliases.
"""

from astuner.schema import JudgeOutput, WorkflowOutput
from astuner.api import AlgorithmConfig, DatasetConfig, TunerModelConfig, tune

TunerChatModel, Algorithm, Dataset = TunerModelConfig, AlgorithmConfig, DatasetConfig

__all__ = ["tune", "DatasetConfig", "TunerModelConfig", "AlgorithmConfig", "WorkflowOutput", "JudgeOutput",
           "TunerChatModel", "Algorithm", "Dataset"]
