"""Idle OpenMP threads sleep in astuner's processes (astuner.model.openmp): the astuner command asks for
OMP_WAIT_POLICY=PASSIVE before torch loads, keeps a policy the user chose, changes nothing once torch is loaded,
and an hf engine on the CPU in a process whose threads spin says so once. (Its speed: bench/engine_first_batch.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from loguru import logger

from astuner.model.engines import hf
from astuner.model.openmp import POLICY_VARIABLES
from tests.conftest import write_seed

PROBE = """
import os, sys
from astuner.cli import main
code = main(sys.argv[1:])
print("POLICY=" + os.environ.get("OMP_WAIT_POLICY", "-") + " TORCH=" + str("torch" in sys.modules), file=sys.stderr)
sys.exit(code)
"""


def _dry_run(tmp_path, **policy: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARIABLES} | policy
    project = write_seed(tmp_path)
    proc = subprocess.run([sys.executable, "-c", PROBE, "--conf", str(project.yaml_path), "--dry-run",
                           "--exp-dir", str(tmp_path / "runs")], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-500:]
    return proc.stderr.strip().splitlines()[-1]


def test_the_command_asks_for_sleeping_threads_before_torch_is_loaded(tmp_path):
    assert _dry_run(tmp_path) == "POLICY=PASSIVE TORCH=False"


@pytest.mark.parametrize("name,value,policy", [("OMP_WAIT_POLICY", "ACTIVE", "ACTIVE"), ("GOMP_SPINCOUNT", "1000", "-"),
                                               ("KMP_BLOCKTIME", "0", "-")])
def test_a_wait_policy_the_user_chose_is_kept(tmp_path, name, value, policy):
    assert _dry_run(tmp_path, **{name: value}) == f"POLICY={policy} TORCH=False"


def test_nothing_is_changed_once_torch_is_loaded():
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARIABLES}
    code = ("import os, torch\nfrom astuner.model.openmp import prefer_passive_waits\n"
            "print(prefer_passive_waits(), os.environ.get('OMP_WAIT_POLICY', '-'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.split() == ["late", "-"], proc.stderr[-500:]


def _engines_warnings(model, monkeypatch, **policy: str) -> list[str]:
    for name in POLICY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in policy.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(hf, "_SPINNING_NOTED", False)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m).rstrip("\n")), level="WARNING", format="{message}")
    try:
        for _ in range(2):  # a second engine in the same process says nothing more
            hf.HFEngine(model, [2], 0)
    finally:
        logger.remove(sink)
    return lines


def test_a_cpu_engine_whose_threads_spin_says_so_once(tiny_model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    lines = _engines_warnings(model, monkeypatch)
    assert len(lines) == 1 and len(lines[0]) <= 300 and "set OMP_WAIT_POLICY=PASSIVE before torch" in lines[0]
    assert _engines_warnings(model, monkeypatch, OMP_WAIT_POLICY="PASSIVE") == []
