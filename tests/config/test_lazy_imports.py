"""A workflow or judge that imports, inside its body, a package this environment lacks (agentscope.tuner's samples
import Trinity-RFT's reward functions in their judges) is refused before anything is written, in one line naming
the import and what to use, not failed episode by episode."""

from __future__ import annotations

import importlib.util

import pytest

from astuner.config.lazy_imports import lazy_import_problem, missing_imports
from astuner.errors import UserError
from astuner.tuner import AlgorithmConfig, DatasetConfig, TunerModelConfig, tune
from tests.api.test_tune_api import run_react_agent

pytestmark = pytest.mark.skipif(importlib.util.find_spec("trinity") is not None,
                                reason="Trinity-RFT is installed here: its reward functions import")


async def boxed_judge(task, response, auxiliary_models=None):
    from trinity.common.rewards.math_reward import MathBoxedRewardFn

    return MathBoxedRewardFn()(response.get_text_content(), truth=task["answer"])["accuracy"]


async def guarded_judge(task, response, auxiliary_models=None):
    try:
        import trinity  # noqa: F401  an optional dependency the code handles
    except ImportError:
        pass
    import json  # noqa: F401  installed
    return 1.0


class BoxedJudge:
    def compute_reward(self, workflow_task, workflow_output):
        import trinity.common.rewards.math_reward  # noqa: F401
        return 1.0, True


def test_only_unguarded_imports_of_missing_packages_count():
    assert [module for module, _, _ in missing_imports(boxed_judge)] == ["trinity.common.rewards.math_reward"]
    assert missing_imports(guarded_judge) == []
    (module, path, line), = missing_imports(BoxedJudge)
    assert module == "trinity.common.rewards.math_reward" and path == __file__
    with open(__file__) as source:
        assert "import trinity.common.rewards.math_reward" in source.read().splitlines()[line - 1]
    said = lazy_import_problem(boxed_judge, "judge_func")
    assert said.startswith("judge_func: boxed_judge imports trinity.common.rewards.math_reward (at ")
    assert "astuner.task_judge.math_answer" in said and "\n" not in said


def test_tune_refuses_a_judge_importing_trinity_before_the_run_folder_exists(tmp_path, tiny_model_dir,
                                                                            monkeypatch, gsm8k_dir):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as caught:
        tune(workflow_func=run_react_agent, judge_func=boxed_judge,
             model=TunerModelConfig(model_path=str(tiny_model_dir), max_model_len=2048, max_tokens=8),
             train_dataset=DatasetConfig(path=str(gsm8k_dir), split="train", total_steps=1),
             algorithm=AlgorithmConfig(group_size=2, batch_size=2), experiment_name="trinity_judge")
    said = str(caught.value)
    assert "judge_func" in said and "imports trinity.common.rewards.math_reward" in said
    assert "every episode would fail on it" in said and "astuner.task_judge.math_answer" in said
    assert not (tmp_path / "checkpoints" / "AgentScope" / "trinity_judge").exists()
