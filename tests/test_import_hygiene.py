"""`astuner --help` and `--dry-run` must not import heavy packages."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import write_seed

HEAVY = ("torch", "transformers", "ray", "vllm", "verl", "trinity", "datasets")

PROBE = """
import sys
from astuner.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def _probe(args, cwd):
    return subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_help_imports_nothing_heavy(tmp_path):
    proc = _probe(["--help"], tmp_path)
    assert proc.returncode == 0
    assert "HEAVY=\n" in proc.stderr


def test_dry_run_imports_nothing_heavy(tmp_path):
    project = write_seed(tmp_path)
    proc = _probe(["--conf", str(project.yaml_path), "--dry-run"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=\n" in proc.stderr, proc.stderr[-500:]


def test_dry_run_of_math_agent_tutorial_imports_nothing_heavy(tmp_path):
    from tests.conftest import REPO_ROOT

    conf = REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml"
    proc = _probe(["--conf", str(conf), "--dry-run"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=\n" in proc.stderr, proc.stderr[-500:]
