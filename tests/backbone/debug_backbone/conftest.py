"""Fixtures of the debug trainer's tests."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import REPO_ROOT


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the tiny CPU tutorial in a temp folder, the working folder (the model gets created there)."""
    shutil.copytree(REPO_ROOT / "tutorial" / "example_tiny_cpu", tmp_path / "tutorial" / "example_tiny_cpu")
    monkeypatch.chdir(tmp_path)
    return tmp_path
