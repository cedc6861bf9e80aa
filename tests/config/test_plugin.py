"""The plug-in resolver: module and file forms, lookup roots, and its errors."""

from __future__ import annotations

import pytest

from astuner import Workflow
from astuner.config.plugin import resolve_plugin, split_plugin_string
from astuner.errors import PluginError
from astuner.task_judge import check_judge_plugin
from astuner.task_judge.math_answer_as_judge import MathAnswerAsJudge
from astuner.workflow import check_workflow_plugin

WORKFLOW_SRC = """\
from astuner import Workflow, WorkflowOutput

class MyWorkflow(Workflow):
    async def execute(self, workflow_task, model_tuner):
        return WorkflowOutput(reward=1.0)

async def my_workflow_fn(task, model, auxiliary_models=None):
    return WorkflowOutput(reward=1.0)

async def too_few(task):
    return None

def helper():
    pass
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "flows.py").write_text(WORKFLOW_SRC)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "my_flow_file.py").write_text(WORKFLOW_SRC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_module_form(project):
    cls = resolve_plugin("my_pkg.flows->MyWorkflow", "k", check_workflow_plugin)
    assert issubclass(cls, Workflow) and cls.__name__ == "MyWorkflow"


def test_file_form_relative_to_cwd(project):
    fn = resolve_plugin("scripts/my_flow_file.py->my_workflow_fn", "k", check_workflow_plugin)
    assert fn.__name__ == "my_workflow_fn"


def test_file_form_absolute(project):
    cls = resolve_plugin(f"{project}/scripts/my_flow_file.py->MyWorkflow", "k", check_workflow_plugin)
    assert cls.__name__ == "MyWorkflow"


def test_extra_roots_find_module_and_file_outside_cwd(project, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    assert resolve_plugin("my_pkg.flows->MyWorkflow", "k", check_workflow_plugin, [project]).__name__ == "MyWorkflow"
    assert resolve_plugin("scripts/my_flow_file.py->MyWorkflow", "k", None, [project]).__name__ == "MyWorkflow"


def test_installed_module(project):
    assert resolve_plugin("astuner.task_judge.math_answer_as_judge->MathAnswerAsJudge", "k",
                          check_judge_plugin) is MathAnswerAsJudge


@pytest.mark.parametrize("spec", ["no_arrow.Name", "->Name", "mod->", "mod->not-an-identifier"])
def test_malformed_strings(spec):
    with pytest.raises(PluginError, match="my.key"):
        split_plugin_string(spec, "my.key")


def test_name_missing_lists_what_module_defines(project):
    with pytest.raises(PluginError) as info:
        resolve_plugin("my_pkg.flows->MyWorkflw", "k")
    message = str(info.value)
    assert "did you mean 'MyWorkflow'" in message
    assert "MyWorkflow, helper, my_workflow_fn, too_few" in message
    assert "WorkflowOutput" not in message  # imported names are not "defined" there


def test_missing_dependency_is_named(project):
    (project / "my_pkg" / "needs_dep.py").write_text("import not_installed_pkg_xyz\n")
    with pytest.raises(PluginError, match="imports 'not_installed_pkg_xyz', which is not installed"):
        resolve_plugin("my_pkg.needs_dep->X", "k")


def test_module_raising_at_import_reports_location(project):
    (project / "my_pkg" / "raises.py").write_text("x = 1\nraise RuntimeError('boom')\n")
    with pytest.raises(PluginError, match=r"raises.py:2: RuntimeError: boom"):
        resolve_plugin("my_pkg.raises->X", "k")


@pytest.mark.parametrize("name,problem", [
    ("helper", "is not an async function"),
    ("too_few", "takes 1 positional parameter(s), needs 2"),
])
def test_workflow_kind_errors(project, name, problem):
    with pytest.raises(PluginError) as info:
        resolve_plugin(f"my_pkg.flows->{name}", "astuner.rollout.agentscope_workflow", check_workflow_plugin)
    assert "must be a Workflow subclass" in str(info.value)
    assert problem in str(info.value) or name == "helper"


def test_judge_kind_errors(project):
    with pytest.raises(PluginError, match="must be a BaseJudge subclass"):
        resolve_plugin("my_pkg.flows->MyWorkflow", "astuner.task_judge.judge_protocol", check_judge_plugin)


def test_base_classes_themselves_are_rejected():
    assert check_workflow_plugin(Workflow) is not None

    class NoExecute(Workflow):
        pass

    assert "does not implement execute" in check_workflow_plugin(NoExecute)
