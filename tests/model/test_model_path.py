"""model.path resolves the same way on every backbone: a folder found like any user path, a tiny model
created where asked, a hub id passed on, and a folder path that does not exist refused up front."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from astuner.errors import DataError
from astuner.model.model_path import resolve_model_path


def _cfg(path, tiny=None):
    return SimpleNamespace(model=SimpleNamespace(path=path, tiny=tiny))


def test_found_folder_hub_id_and_missing_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "mine").mkdir(parents=True)
    conf_dir = tmp_path / "project"
    conf_dir.mkdir()
    assert resolve_model_path(_cfg("models/mine"), [conf_dir]) == str(tmp_path / "models" / "mine")
    assert resolve_model_path(_cfg("Qwen/Qwen2.5-14B-Instruct"), [conf_dir]) == "Qwen/Qwen2.5-14B-Instruct"
    with pytest.raises(DataError, match="no model folder 'launcher_record/.models/warm'"):
        resolve_model_path(_cfg("launcher_record/.models/warm"), [conf_dir])
    with pytest.raises(DataError, match="no model folder"):
        resolve_model_path(_cfg(str(tmp_path / "absent")), [conf_dir])
