"""The trainable model (`ModelTuner`, in `astuner.model.model_tuner`) and the function API:

    from astuner.tuner import tune, DatasetConfig, TunerModelConfig, AlgorithmConfig, WorkflowOutput, JudgeOutput
"""

from astuner.schema import JudgeOutput, WorkflowOutput
from astuner.api import AlgorithmConfig, DatasetConfig, TunerModelConfig, tune

__all__ = ["tune", "DatasetConfig", "TunerModelConfig", "AlgorithmConfig", "WorkflowOutput", "JudgeOutput"]
