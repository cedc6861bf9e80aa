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
    ("helper", "must be a Workflow subclass"),
    # an async function with too few parameters: only the function's form is said (the message was 306 characters)
    ("too_few", "must be an async function (task, model, ...); it takes 1 positional parameter, not 2"),
])
def test_workflow_kind_errors(project, name, problem):
    with pytest.raises(PluginError) as info:
        resolve_plugin(f"my_pkg.flows->{name}", "astuner.rollout.agentscope_workflow", check_workflow_plugin)
    assert problem in str(info.value), str(info.value)
    assert len(f"astuner: error: {info.value}") <= 300


def test_a_judge_of_one_argument_is_told_in_one_short_line(project):
    from astuner.task_judge.base import check_judge_plugin

    folder = project / "a_rather_long_folder_name_for_the_judges_of_this_project"
    folder.mkdir()
    (folder / "my_judge_functions.py").write_text("async def judge(task):\n    return 1.0\n")
    with pytest.raises(PluginError) as info:
        resolve_plugin(f"{folder}/my_judge_functions.py->judge", "astuner.task_judge.judge_protocol",
                       check_judge_plugin)
    message = f"astuner: error: {info.value}".replace(f"{project}/", "")
    assert "must be an async function (task, response, ...); it takes 1 positional parameter, not 2" in message
    assert len(message) <= 300, len(message)


def test_judge_kind_errors(project):
    with pytest.raises(PluginError, match="must be a BaseJudge subclass"):
        resolve_plugin("my_pkg.flows->MyWorkflow", "astuner.task_judge.judge_protocol", check_judge_plugin)


def test_base_classes_themselves_are_rejected():
    assert check_workflow_plugin(Workflow) is not None

    class NoExecute(Workflow):
        pass

    assert "does not implement execute" in check_workflow_plugin(NoExecute)
