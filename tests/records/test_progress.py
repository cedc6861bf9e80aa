"""The console during a run, as a terminal shows it (the run under a pseudo-terminal of 120 columns, its output
replayed row by row): progress bars and log lines never share a row, no bar is left behind, every step line ends
with an ETA while steps remain; with stderr not a terminal, plain lines and no bar."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO_ROOT

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d \| (INFO|WARNING|ERROR|DEBUG) +\| ")


def run_in_terminal(argv: list[str], cwd) -> tuple[int, str]:
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "astuner", *argv], cwd=cwd, stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True, env={**os.environ, "PYTHONWARNINGS": "default"})
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(), out.decode("utf-8", errors="replace")


def screen_rows(raw: str) -> list[str]:
    """What each row of the terminal finally shows: colours dropped, each carriage return writing over the row
    from its first column."""
    rows = []
    for line in ANSI.sub("", raw).replace("\r\n", "\n").split("\n"):
        row = ""
        for part in line.split("\r"):
            row = part + row[len(part):]
        rows.append(row.rstrip())
    return rows


def test_bars_and_log_lines_never_share_a_row(tmp_path):
    code, raw = run_in_terminal(["--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", "--exp-dir", str(tmp_path),
                                 f"astuner.model.path={tmp_path}/model", "astuner.trainer_common.total_training_steps=40"],
                                REPO_ROOT)
    assert code == 0, raw[-3000:]
    assert "%|" in raw  # a bar was drawn on the terminal
    rows = screen_rows(raw)
    for row in rows:
        assert "%|" not in row, row  # no bar left on a row, alone or beside a log line
        if " | INFO " in row:
            assert LOG_LINE.match(row), row  # a log line starts its own row (was: "…reward=0.000]1" + "0:46:50 | …")
    steps = [row for row in rows if re.search(r"\| step \d+/40 \|", row)]
    assert len(steps) == 40
    assert all(" | eta " in row for row in steps[:-1]) or all(row.endswith("s") for row in steps)


def test_without_a_terminal_there_is_no_bar(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "astuner", "--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml",
                           "--exp-dir", str(tmp_path), f"astuner.model.path={tmp_path}/model",
                           "astuner.trainer_common.total_training_steps=3"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "%|" not in proc.stderr and "\r" not in proc.stderr and "\x1b[" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if re.search(r"\| step \d/3 \|", line)]) == 3


def test_without_a_terminal_a_long_phase_logs_its_progress_with_an_eta(monkeypatch):
    """The SFT warm start printed nothing for minutes (412 s under load) where stderr is no terminal: now a line
    every `every_s` seconds with the count, the loss and the ETA."""
    from loguru import logger

    from astuner.records.progress import Progress

    lines: list[str] = []
    handle = logger.add(lambda m: lines.append(str(m)), format="{message}")
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr("astuner.records.progress.time.monotonic", lambda: next(clock))
    try:
        bar = Progress(10, "SFT warm start", every_s=25)
        for step in range(10):
            bar.update(1, loss=f"{1 / (step + 1):.3f}")
        bar.close()
    finally:
        logger.remove(handle)
    assert lines and all(line.startswith("SFT warm start: ") and ", eta " in line for line in lines), lines
    assert "SFT warm start: 3/10, loss 0.333, eta 1m33s" in lines[0]  # 40 s for 3 steps, 7 to go


def test_a_terminal_of_no_width_gets_the_progress_lines(monkeypatch):
    """Some pseudo-terminals report 0 columns: tqdm then draws nothing, and the warm start was silent (103 s)."""
    import fcntl
    import pty
    import struct
    import termios

    from astuner.records.progress import Progress

    master, slave = pty.openpty()
    try:
        for columns, expect_bar in ((0, False), (120, True)):
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
            with os.fdopen(os.dup(slave), "w") as terminal:
                monkeypatch.setattr(sys, "stderr", terminal)
                bar = Progress(3, "SFT warm start")
                assert bar.tty is expect_bar and bar.bar.disable is not expect_bar, columns
                bar.close()
    finally:
        os.close(master)
        os.close(slave)


def test_a_verbose_call_takes_back_what_a_quiet_one_set(monkeypatch):
    """tune() in a notebook, then tune() with ASTUNER_VERBOSE=1: the libraries speak again; what the user set
    stays."""
    import os

    from astuner.records import progress

    for name, _ in progress._QUIET_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")  # the user's own
    monkeypatch.setattr(progress, "_QUIETED", {})
    monkeypatch.delenv("ASTUNER_VERBOSE", raising=False)
    progress.quiet_libraries()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and os.environ["TRANSFORMERS_VERBOSITY"] == "info"
    progress.quiet_libraries(verbose=True)
    assert "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ and os.environ["TRANSFORMERS_VERBOSITY"] == "info"
