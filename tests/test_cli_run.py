"""The CLI's run path: dry run, run folder records, refusing to overwrite, resume, exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from astuner import backbone
from astuner.records.run_dir import NEVER_STEPPED, holds_run, prepare_run_dir
from astuner.errors import RunDirError
from tests import fake_backbone
from tests.conftest import REPO_ROOT, SEED_YAML, run_cli

YAML = "math_agent/math_agent.yaml"


@pytest.fixture
def fake(seed, monkeypatch):
    """The fake backbone, and the seed reading a local task file (a run reads its tasks before it starts)."""
    (seed.root / "tasks.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    seed.yaml_path.write_text(SEED_YAML.replace(
        "type: huggingface_dat_repo ", "type: dataset_file\n    dataset_file: {training: {file_path: tasks.jsonl}}\n   "))
    monkeypatch.setitem(backbone.BACKBONES, "debug", "tests.fake_backbone")
    fake_backbone.CALLS.clear()
    return fake_backbone


def test_dry_run_prints_merged_config_and_writes_nothing(seed, capsys):
    code, out, err = run_cli(["--conf", YAML, "--dry-run", "astuner.rollout.num_repeat=6"], capsys)
    assert code == 0, err
    merged = yaml.safe_load(out)
    assert merged["astuner"]["rollout"]["num_repeat"] == 6
    assert merged["astuner"]["experiment_name"] == "math_agent"
    assert merged["trinity"]["trainer"]["max_token_len_per_gpu"] == 13000
    assert "config OK" in err and "MathAgentWorkflow" in err
    # the seed names a hub dataset and a hub model: said, not silently passed
    assert "dataset 'gsm8k/main' is not a local copy: not checked offline" in err
    assert "model 'Qwen/Qwen2.5-14B-Instruct' is a hub id: not checked offline" in err
    assert not (seed.root / "launcher_record").exists()


@pytest.mark.parametrize("name, package", [("verl", "verl"), ("trinity", "trinity")])
def test_a_dry_run_for_a_backbone_not_installed_here_says_the_run_would_be_refused(seed, capsys, name, package):
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed in this environment")
    code, _, err = run_cli(["--conf", YAML, "--dry-run", f"--backbone={name}"], capsys)
    assert code == 0, err  # the config is still checked: what astuner reads, the translation
    ok, last = err.strip().splitlines()[-2:]
    assert ok.startswith("astuner: config OK"), err
    assert last.startswith(f"astuner: but not runnable in this environment: backbone {name} needs"), last
    assert f"pip install 'astuner[{name}]'" in last and len(last) <= 300
    code, _, err = run_cli(["--conf", YAML, "--dry-run"], capsys)  # the debug backbone has what it needs
    assert code == 0 and "not runnable here" not in err


def test_run_creates_records(seed, capsys, fake):
    code, _, err = run_cli(["--conf", YAML, "--exp-dir", "runs"], capsys)
    assert code == 0, err
    root = seed.root / "runs" / "math_agent"
    assert (root / "ran.txt").read_text() == "math_agent"
    for sub in ("tensorboard", "checkpoints", "trajectories"):
        assert (root / sub).is_dir()
    saved = yaml.safe_load((root / "config.yaml").read_text())
    assert saved["astuner"]["rollout"]["max_num_seqs"] == 40
    log = (root / "astuner.log").read_text()
    assert "fake backbone ran" in log and "next: astuner view runs/math_agent" in log  # the closing lines
    ctx = fake.CALLS[0]
    assert ctx.plugins.workflow.__name__ == "MathAgentWorkflow"
    assert ctx.plugins.judge.__name__ == "MathAnswerAsJudge"


def test_existing_run_is_refused_then_resumed(seed, capsys, fake):
    assert run_cli(["--conf", YAML], capsys)[0] == 0
    log = seed.root / "launcher_record" / "math_agent" / "astuner.log"
    before = log.read_text()
    code, _, err = run_cli(["--conf", YAML], capsys)
    assert code == 2
    assert "already holds a run; continue it with --resume" in err
    assert log.read_text() == before  # nothing touched
    # a dry run checks the run folder as the run does (it said "config OK", then the run exited 2)
    code, _, err = run_cli(["--conf", YAML, "--dry-run"], capsys)
    assert code == 2 and "already holds a run; continue it with --resume" in err and "config OK" not in err
    code, _, err = run_cli(["--conf", YAML, "--dry-run", "--resume"], capsys)
    assert code == 0 and "config OK" in err
    code, _, err = run_cli(["--conf", YAML, "--resume", "astuner.rollout.num_repeat=8"], capsys)
    assert code == 0, err
    root = seed.root / "launcher_record" / "math_agent"
    assert "resuming run" in log.read_text()
    assert yaml.safe_load((root / "config.yaml").read_text())["astuner"]["rollout"]["num_repeat"] == 8
    kept = list(root.glob("config.before_resume_*.yaml"))
    assert len(kept) == 1 and yaml.safe_load(kept[0].read_text())["astuner"]["rollout"]["num_repeat"] == 4


def test_experiment_name_override_picks_a_new_folder(seed, capsys, fake):
    assert run_cli(["--conf", YAML], capsys)[0] == 0
    assert run_cli(["--conf", YAML, "astuner.experiment_name=second"], capsys)[0] == 0
    assert (seed.root / "launcher_record" / "second" / "ran.txt").exists()


def test_interrupt_exits_130_and_crash_exits_1(seed, capsys, fake):
    assert run_cli(["--conf", YAML, "+fake_backbone_mode=interrupt"], capsys)[0] == 130
    code, _, err = run_cli(["--conf", YAML, "+fake_backbone_mode=crash", "--resume"], capsys)
    assert code == 1
    assert "RuntimeError: internal bug" in err and "internal failure" in err


def test_a_run_that_ends_before_its_first_step_leaves_no_run_behind(seed, capsys, fake):
    root = seed.root / "launcher_record" / "math_agent"
    assert run_cli(["--conf", YAML, "+fake_backbone_mode=crash"], capsys)[0] == 1
    assert (root / NEVER_STEPPED).exists() and not holds_run(root)
    code, _, err = run_cli(["--conf", YAML], capsys)  # the fixed rerun proceeds, without --resume
    assert code == 0, err
    assert (root / "ran.txt").exists() and not (root / NEVER_STEPPED).exists()
    assert "fake backbone ran" in (root / "astuner.log").read_text()
    failed_logs = list(root.glob("astuner.failed_start.*.log"))
    assert len(failed_logs) == 1 and "internal bug" in failed_logs[0].read_text()


def test_a_run_that_stepped_stays_a_run_when_it_fails(seed, capsys, fake):
    root = seed.root / "launcher_record" / "math_agent"
    assert run_cli(["--conf", YAML, "+fake_backbone_mode=step_then_crash"], capsys)[0] == 1
    assert holds_run(root) and not (root / NEVER_STEPPED).exists()
    code, _, err = run_cli(["--conf", YAML], capsys)
    assert code == 2 and "already holds a run" in err


def test_second_ctrl_c_ends_with_one_line(seed, fake, tmp_path):
    """Ctrl-C while the run winds down from the first one: the CLI's line and exit 130, no task dump."""
    import signal
    import time

    script = tmp_path / "slow.py"
    script.write_text(
        "import sys, time\n"
        "from astuner import backbone\n"
        "backbone.BACKBONES['debug'] = 'tests.fake_backbone'\n"
        "from astuner.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen([sys.executable, str(script), "--conf", YAML, "+fake_backbone_mode=slow_cleanup"],
                            cwd=seed.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "PYTHONPATH": str(REPO_ROOT)})
    run = seed.root / "launcher_record" / "math_agent"

    def wait_for(name):  # each Ctrl-C once the run shows it is where it should land (two at once may merge)
        deadline = time.monotonic() + 300
        while not (run / name).exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert (run / name).exists(), proc.communicate()[1][-2000:]

    wait_for("ran.txt")
    proc.send_signal(signal.SIGINT)
    wait_for("cleaning_up.txt")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == "astuner: error: interrupted twice; stopped at once"
    assert "Traceback" not in err


SLOW_WORKFLOW = """\
import asyncio
from astuner import Workflow, WorkflowOutput


class SlowWorkflow(Workflow):
    async def execute(self, workflow_task, model_tuner):
        open("in_step.txt", "w").write("1")
        await asyncio.sleep(120)
        return WorkflowOutput(reward=1.0)
"""


def test_second_ctrl_c_in_the_debug_trainer_stops_at_once(tmp_path):
    """The debug trainer: the first Ctrl-C asks it to finish the step; the second, while the step's episodes
    are still running, stops the process with the CLI's one line — no asyncio task dump."""
    import os
    import signal
    import time

    (tmp_path / "slow.py").write_text(SLOW_WORKFLOW)
    (tmp_path / "tasks.jsonl").write_text("".join(f'{{"question": "q{i}"}}\n' for i in range(4)))
    (tmp_path / "run.yaml").write_text(
        "astuner:\n  project_name: slow\n  task_reader: {type: dataset_file, dataset_file: {training: {file_path: "
        "tasks.jsonl}}}\n  data: {train_batch_size: 2, max_prompt_length: 32, max_response_length: 8}\n"
        "  model: {path: tiny_model, tiny: {seed: 0, hidden_size: 32, layers: 1, tokenizer: words}}\n"
        "  rollout: {agentscope_workflow: 'slow.py->SlowWorkflow', engine: hf, num_repeat: 2, max_model_len: 64,"
        " max_response_length_in_one_turn: 4, compute_madness_checklist: []}\n"
        "  trainer_common: {total_training_steps: 3, device: cpu, val_before_train: false}\n")
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "astuner", "--conf", "run.yaml"], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=stderr, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})

    def wait_for(seen):  # each Ctrl-C once the run shows it is where it should land (two at once may merge)
        deadline = time.monotonic() + 300
        while not seen() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert seen() and proc.poll() is None, log.read_text()[-2000:]

    wait_for(lambda: (tmp_path / "in_step.txt").exists())
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "Ctrl-C: finishing the current step" in log.read_text())  # and still finishing it
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    err = log.read_text()
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "astuner: error: interrupted twice; stopped at once"
    assert "Traceback" not in err and "Task was destroyed" not in err


def test_prepare_run_dir_refuses_without_resume(tmp_path):
    prepare_run_dir(tmp_path, "exp", {"a": 1}, resume=False)
    with pytest.raises(RunDirError, match="already holds a run"):
        prepare_run_dir(tmp_path, "exp", {"a": 1}, resume=False)
    assert prepare_run_dir(tmp_path, "exp", {"a": 1}, resume=True).resumed


def test_a_resume_keeps_config_aside_only_when_the_config_changed(tmp_path):
    merged = {"trinity": {"trainer": {}}, "astuner": {"seed": 1}}
    run = prepare_run_dir(tmp_path, "exp", merged, resume=False)
    run.config_path.write_text(yaml.safe_dump(merged, sort_keys=False))  # an older run: another order of sections
    (run.root / "metrics.jsonl").write_text('{"step": 1}\n')
    prepare_run_dir(tmp_path, "exp", merged, resume=True)
    assert not list(run.root.glob("config.before_resume_*"))
    prepare_run_dir(tmp_path, "exp", {**merged, "astuner": {"seed": 2}}, resume=True)
    assert len(list(run.root.glob("config.before_resume_*"))) == 1


def test_resume_without_earlier_run_starts_fresh(tmp_path):
    run = prepare_run_dir(tmp_path, "exp", {"a": 1}, resume=True)
    assert not run.resumed and run.config_path.exists()


@pytest.mark.parametrize("entry", [["-m", "astuner"], [str(REPO_ROOT / "launcher.py")]])
def test_module_and_launcher_entry_points(seed, entry):
    proc = subprocess.run([sys.executable, *entry, "--backbone", "debug", "--conf", YAML, "--dry-run"],
                          capture_output=True, text=True, cwd=seed.root, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["astuner"]["project_name"] == "math_agent"


def test_help_exits_0(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and "--dry-run" in out and "--backbone" in out


def test_a_model_folder_whose_weights_do_not_load_is_a_user_error_and_the_fixed_rerun_proceeds(
        seed, capsys, tiny_model_dir, tmp_path):
    """Preflight passes (config, tokenizer and weight files are there); loading the weights fails inside the
    debug backbone: exit 2 with the path, and the folder is marked so the rerun with a good model proceeds."""
    import shutil

    broken = tmp_path / "broken_model"
    shutil.copytree(tiny_model_dir, broken)
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(b"not safetensors")
    (seed.root / "tasks.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    seed.yaml_path.write_text(SEED_YAML.replace(
        "type: huggingface_dat_repo ", "type: dataset_file\n    dataset_file: {training: {file_path: tasks.jsonl}}\n   ")
        .replace("model: {path: Qwen/Qwen2.5-14B-Instruct}", f"model: {{path: {broken}}}"))
    code, out, err = run_cli(["--conf", YAML, "astuner.trainer_common.device=cpu"], capsys)
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("astuner: error: astuner.model.path: cannot load a model from") and str(broken) in last
    root = seed.root / "launcher_record" / "math_agent"
    assert (root / NEVER_STEPPED).exists() and not holds_run(root)


@pytest.mark.parametrize("record", ["metrics.jsonl", "trajectories/step_1.jsonl",
                                    "checkpoints/project/name/global_step_3/model.pt"])
def test_a_failed_run_with_any_record_of_a_step_stays_a_run(tmp_path, record):
    """verl and Trinity write no metrics.jsonl and nest their checkpoints: any record of a step keeps the
    folder a run (never cleared by a rerun); only a folder with none is marked."""
    from astuner.records.run_dir import mark_if_never_stepped

    run = prepare_run_dir(tmp_path, "exp", {"a": 1}, resume=False)
    (run.root / record).parent.mkdir(parents=True, exist_ok=True)
    (run.root / record).write_text("x\n")
    mark_if_never_stepped(run)
    assert holds_run(run.root) and not (run.root / NEVER_STEPPED).exists()
    with pytest.raises(RunDirError, match="already holds a run"):
        prepare_run_dir(tmp_path, "exp", {"a": 1}, resume=False)
    bare = prepare_run_dir(tmp_path, "bare", {"a": 1}, resume=False)
    mark_if_never_stepped(bare)
    assert not holds_run(bare.root) and prepare_run_dir(tmp_path, "bare", {"a": 1}, resume=False).root == bare.root
