"""astuner.auxiliary_models entries (a folder or an endpoint) and the LLM judge's auxiliary_model, checked before
anything is written: each problem one line naming the key."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT, run_cli

TINY = str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml")


def dry_run(tmp_path, capsys, *overrides):
    return run_cli(["--conf", TINY, "--dry-run", "--exp-dir", str(tmp_path / "runs"),
                    f"astuner.model.path={tmp_path / 'model'}", *overrides], capsys)


@pytest.mark.parametrize("entry, said", [
    ("{path: a/b, base_url: 'http://127.0.0.1:9/v1', model: m}",
     "astuner.auxiliary_models.judge names both a folder (path) and an endpoint (base_url); keep one"),
    ("{base_url: 'http://127.0.0.1:9/v1'}",
     "astuner.auxiliary_models.judge.model is not set; name the model at http://127.0.0.1:9/v1"),
    ("{temperature: 0.5}", "astuner.auxiliary_models.judge names no model; set path (a model folder) or base_url"),
    ("{base_url: 'http://127.0.0.1:9/v1', model: m, api_key_env: ASTUNER_TEST_UNSET_KEY}",
     "astuner.auxiliary_models.judge.api_key_env: the environment variable ASTUNER_TEST_UNSET_KEY is not set here"),
])
def test_a_wrong_auxiliary_entry_is_one_line_before_anything_is_written(tmp_path, capsys, monkeypatch, entry, said):
    monkeypatch.delenv("ASTUNER_TEST_UNSET_KEY", raising=False)
    code, _, err = dry_run(tmp_path, capsys, f"+astuner.auxiliary_models.judge={entry}")
    assert code == 2 and said in err, err[-2000:]
    assert not (tmp_path / "runs").exists()


def test_an_endpoint_entry_passes_with_its_key_set(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ASTUNER_TEST_KEY", "sk-1")
    code, _, err = dry_run(tmp_path, capsys, "+astuner.auxiliary_models.judge={base_url: 'http://127.0.0.1:9/v1', "
                                             "model: m, api_key_env: ASTUNER_TEST_KEY}",
                           "astuner.task_judge.llm_judge.auxiliary_model=judge")
    assert code == 0 and "auxiliary judge: m at http://127.0.0.1:9/v1" in err, err[-2000:]


def test_the_llm_judge_names_a_declared_auxiliary_model(tmp_path, capsys):
    code, _, err = dry_run(tmp_path, capsys, "astuner.task_judge.llm_judge.auxiliary_model=referee")
    assert code == 2 and "astuner.task_judge.llm_judge.auxiliary_model 'referee' is no astuner.auxiliary_models " \
                         "entry (none is declared)" in err, err[-2000:]
