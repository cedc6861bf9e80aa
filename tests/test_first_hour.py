"""What a new user meets first: the command line's own mistakes in one line, each command's help saying what its
arguments are, and a run's closing lines (what it did, where its files are, what to type next)."""

from __future__ import annotations

import json

from astuner import __version__
from astuner.records.run_dir import RunDir
from astuner.records.summary import closing_lines
from tests.conftest import run_cli


def test_version_and_a_word_that_is_no_command(capsys):
    code, out, err = run_cli(["--version"], capsys)
    assert code == 0 and out.strip() == f"astuner {__version__}"
    for argv, needle in [(["frobnicate"], "'frobnicate' is not a command; the commands: astuner --conf PATH (train), "
                                          "view, chat, eval, serve, traces, merge-lora"),
                         (["serv", "x"], "did you mean 'astuner serve'?"),
                         (["my_agent.yaml"], "did you mean 'astuner --conf my_agent.yaml'?")]:
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and err.strip().splitlines() == [err.strip()] and needle in err, (argv, err)
        assert "--conf" not in err.split(";")[0]  # not "the following arguments are required: --conf"


def test_every_subcommand_and_argument_has_its_help(capsys):
    for argv, needles in [(["traces", "list", "--help"], ["The store's episodes", "FILE        the trace store"]),
                          (["traces", "check", "--help"], ["give the tokens recorded", "FILE"]),
                          (["traces", "import", "--help"], ["Render a chat log", "LOG"]),
                          (["traces", "judge", "--help"], ["Rewards for the store's episodes", "the trace store"]),
                          (["chat", "--help"], ["the most tokens one reply may have (default 256)"])]:
        code, out, err = run_cli(argv, capsys)
        text = " ".join(out.split())
        assert code == 0 and all(" ".join(n.split()) in text for n in needles), (argv, out)


def test_a_runs_closing_lines_say_its_validation_files_and_next_commands(tmp_path):
    run = RunDir(tmp_path / "run", resumed=False)
    (run.root / "checkpoints" / "global_step_2").mkdir(parents=True)
    (run.root / "checkpoints" / "global_step_10").mkdir()
    (run.root / "reward_curve.png").write_bytes(b"png")
    rows = [{"step": 0, "val/reward_mean": 0.25}, {"step": 5, "val/reward_mean": 0.5},
            {"step": 10, "val/reward_mean": 0.375}] + [{"step": s} for s in range(1, 11)]
    (run.root / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in sorted(rows, key=lambda r: r["step"]))
                                            + "\n{cut")
    lines = closing_lines(run, tmp_path / "my_agent.yaml")
    checkpoint = run.root / "checkpoints" / "global_step_10"  # the last by number, not by name
    assert lines == [
        "run finished: 10 training steps; validation reward 0.375 at step 10 (the last), best 0.500 at step 5",
        f"in the run folder: checkpoint {checkpoint}, reward curve {run.root / 'reward_curve.png'}, metrics "
        f"{run.root / 'metrics.jsonl'}",
        f"next: astuner view {run.root}  |  astuner chat {checkpoint}  |  astuner eval --conf "
        f"{tmp_path / 'my_agent.yaml'} --model {checkpoint}"]


def test_the_version_is_pyprojects():
    import tomllib

    from tests.conftest import REPO_ROOT

    assert tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"] == __version__
