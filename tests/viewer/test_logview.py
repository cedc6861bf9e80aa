"""`--with-logview`: the run prints the viewer's URL, and that URL serves the run while it trains."""

from __future__ import annotations

import json
import re
import urllib.request

from tests.conftest import REPO_ROOT


def test_with_logview_serves_the_live_run(tmp_path):
    from loguru import logger

    from astuner.cli import main

    seen: dict = {}

    def sink(message) -> None:  # runs in the trainer's thread, mid-run: the viewer answers from its own
        text = str(message)
        if "trajectory viewer: " in text:
            seen["url"] = re.search(r"http://127\.0\.0\.1:\d+/", text).group(0)
        if "step 3/4" in text and "url" in seen:
            with urllib.request.urlopen(seen["url"] + "api/run", timeout=10) as response:
                seen["run"] = json.loads(response.read())
            with urllib.request.urlopen(seen["url"], timeout=10) as response:
                seen["page"] = response.read()

    handle = None
    original_add = logger.add

    def add(*args, **kwargs):  # the run re-creates its sinks (console, log file); ours joins them
        nonlocal handle
        result = original_add(*args, **kwargs)
        if handle is None:
            handle = original_add(sink, level="INFO")
        return result

    logger.add = add
    try:
        code = main(["--conf", str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml"), "--exp-dir",
                     str(tmp_path), f"astuner.model.path={tmp_path}/model", "astuner.trainer_common.total_training_steps=4",
                     "astuner.trainer_common.save_freq=-1", "--with-logview"])
    finally:
        logger.add = original_add
        if handle is not None:
            logger.remove(handle)
    assert code == 0
    assert seen["run"]["live"] is True and seen["run"]["name"] == "tiny_cpu"
    assert seen["run"]["steps"] == [1, 2, 3]  # mid-run: the steps written so far
    assert b"/static/app.js" in seen["page"]
    try:  # the viewer stops with the run
        urllib.request.urlopen(seen["url"] + "api/run", timeout=2)
        stopped = False
    except OSError:
        stopped = True
    assert stopped


def test_a_busy_logview_port_is_refused_before_the_run_folder_exists(tmp_path, capsys, monkeypatch):
    """Was: refused after the run folder was made, which then blocked the rerun on a free port."""
    import socket

    from tests.conftest import run_cli

    monkeypatch.chdir(REPO_ROOT)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        argv = ["--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", "--exp-dir", str(tmp_path / "runs"),
                "--with-logview", "--logview-port", str(taken.getsockname()[1]), f"astuner.model.path={tmp_path}/model",
                "astuner.trainer_common.total_training_steps=1"]
        code, _, err = run_cli(argv, capsys)
    finally:
        taken.close()
    assert code == 2 and "the viewer cannot listen on 127.0.0.1:" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
