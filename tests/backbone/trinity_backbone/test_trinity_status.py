"""A Trinity stage that fails is a failed run: Trinity catches the exception inside its stage and returns it
in its own `StageStatus`, which the backbone turns into exit code 1 with the cause in one line. Runs in the
Trinity environment (CI's `.ci/backbones trinity`); skipped elsewhere."""

from __future__ import annotations

import pytest

from tests.conftest import needs

needs("trinity")

from trinity.cli.launcher import StageError, StageStatus  # noqa: E402

from astuner.backbone.trinity.backbone import check_status  # noqa: E402
from astuner.errors import RunFailed  # noqa: E402


def test_a_failed_stage_is_a_failed_run_with_its_cause_in_one_line():
    failed = StageStatus(stage="both", success=False,
                         error=StageError(type_name="RuntimeError", message="workflow raised\nmore detail",
                                          traceback_text="Traceback ..."))
    with pytest.raises(RunFailed) as info:
        check_status(failed)
    assert str(info.value) == "Trinity-RFT's both stage failed: RuntimeError: workflow raised"
    assert info.value.exit_code == 1
    check_status(StageStatus(stage="both", success=True))


def test_an_error_raised_in_a_ray_actor_is_reported_by_its_root_cause():
    # as Trinity's launcher reported a vLLM engine that could not start (colours and all)
    message = ("\x1b[36mray::Explorer.prepare()\x1b[39m (pid=4017, ip=127.0.0.1, actor_id=538e)\n"
               "  File \"/x/trinity/explorer/explorer.py\", line 252, in prepare\n"
               "ray.exceptions.RayTaskError(ModuleNotFoundError): \x1b[36mray::vLLMRolloutModel.prepare()\x1b[39m\n"
               "  File \"/x/trinity/common/models/vllm_patch/__init__.py\", line 44, in vllm_patch\n"
               "ModuleNotFoundError: No module named 'vllm.tool_parsers.qwen3coder_tool_parser'\n")
    failed = StageStatus(stage="explore", success=False, error=StageError(
        type_name="RayTaskError(ModuleNotFoundError)", message=message, traceback_text=""))
    with pytest.raises(RunFailed) as info:
        check_status(failed)
    assert str(info.value) == ("Trinity-RFT's explore stage failed: ModuleNotFoundError: No module named "
                               "'vllm.tool_parsers.qwen3coder_tool_parser'")


def test_the_cli_prints_one_line_and_exits_1(monkeypatch, capsys, tmp_path):
    from astuner import cli

    def failing_run(args):
        check_status(StageStatus(stage="explore", success=False,
                                 error=StageError(type_name="ValueError", message="bad", traceback_text="")))

    monkeypatch.setattr(cli, "_run", failing_run)
    assert cli.main(["--conf", str(tmp_path / "x.yaml")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("Trinity-RFT's explore stage failed: ValueError: bad")
