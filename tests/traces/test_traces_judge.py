"""`astuner traces judge`: a config's judge scores a store's episodes after the fact from their conversations (the
tutorial's `reading_copied`): unrewarded episodes by default, every one with --all; a judge failing on some
episodes names them, one failing on all is one line and writes nothing; a store another process writes is refused."""

from __future__ import annotations

import json

import pytest

from astuner.records.trace_store import TraceStore
from tests.conftest import REPO_ROOT, run_cli

CONF = str(REPO_ROOT / "tutorial" / "example_traces" / "from_traces.yaml")
JUDGE = f"{REPO_ROOT}/tutorial/example_traces/trace_judge.py->reading_copied"
ASK = {"role": "user", "content": "What does sensor S1 read?"}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "read_sensor", "arguments": "{}"}}]}


def episode(name: str, reading: str, answer: str, reward=None) -> list[dict]:
    """The two calls of a sensor episode: the tool call, then the answer after the tool's result."""
    result = {"role": "tool", "tool_call_id": "c1", "content": reading}
    last = {"session_id": name, "messages": [ASK, CALL, result, {"role": "assistant", "content": answer}]}
    if reward is not None:
        last["reward"] = reward
    return [{"session_id": name, "messages": [ASK, CALL]}, last]


@pytest.fixture
def store(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the tutorial's config names its files from the repository root
    log = tmp_path / "log.jsonl"
    rows = (episode("right", "497", "It reads \\boxed{497}.") + episode("wrong", "497", "\\boxed{479}")
            + episode("rated", "613", "\\boxed{613}", reward=0.0)  # a user's verdict, kept unless --all
            + [{"session_id": "no-tool", "messages": [ASK, {"role": "assistant", "content": "\\boxed{497}"}]}]
            # thinking before the answer: the judge reads the answer, not a guess in the thinking
            + episode("thinking", "251", "<think>maybe \\boxed{215}</think>251"))
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "traces.db"
    code, _, err = run_cli(["traces", "import", str(log), "--store", str(path), "--model", str(tiny_model_dir)],
                           capsys)
    assert code == 0, err
    return path


def rewards(path) -> dict:
    return {e["id"]: (e["reward"], (e["feedback"] or {}).get("from")) for e in TraceStore.read(path).episodes()}


def test_judges_unrewarded_episodes_from_their_conversation(store, capsys):
    code, out, err = run_cli(["traces", "judge", str(store), "--conf", CONF, "--judge", JUDGE, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out) == {"episodes": 5, "judged": 4, "kept": 1, "failed": [], "mean_reward": 0.5}
    assert "judged 4 of 5 episodes (mean reward 0.500); 1 kept their reward (--all judges them too)" in err
    assert rewards(store) == {"right": (1.0, "judge"), "wrong": (0.0, "judge"), "rated": (0.0, "log"),
                              "no-tool": (0.0, "judge"), "thinking": (1.0, "judge")}
    feedback = next(e["feedback"] for e in TraceStore.read(store).episodes() if e["id"] == "right")
    assert feedback == {"from": "judge", "judge": "reading_copied", "is_success": True, "metrics": {}}

    code, _, err = run_cli(["traces", "judge", str(store), "--conf", CONF, "--judge", JUDGE, "--all"], capsys)
    assert code == 0 and "judged 5 of 5 episodes" in err
    assert rewards(store)["rated"] == (1.0, "judge")  # --all: the user's 0 replaced by the judge's verdict


def test_a_judge_that_fails_on_some_or_all(store, tmp_path, capsys):
    picky = tmp_path / "picky.py"
    picky.write_text("import numpy\n"
                     "from astuner import JudgeOutput\n"
                     "async def picky(task, response, auxiliary_models=None):\n"
                     "    print('judging', task['task_id'])  # a judge's own output stays off the --json report\n"
                     "    if task['task_id'] == 'wrong':\n"
                     "        raise ValueError('cannot tell')\n"
                     "    if task['task_id'] == 'no-tool':\n"
                     "        return JudgeOutput(reward=float('nan'))  # no reward: failed, the store unharmed\n"
                     "    if task['task_id'] == 'thinking':\n"
                     "        return JudgeOutput(reward=1.0, metrics={'note': 'text'})\n"
                     "    return JudgeOutput(reward=0.5, metrics={'length': numpy.float32(len(response))})\n")
    code, out, err = run_cli(["traces", "judge", str(store), "--conf", CONF, "--judge", f"{picky}->picky", "--json"],
                             capsys)
    assert code == 0, err
    assert json.loads(out)["failed"] == ["no-tool: ValueError: judge picky gave reward nan; a reward must be a "
                                         "finite number",
                                         "wrong: ValueError: cannot tell"]
    assert "not judged: wrong: ValueError: cannot tell" in err and "judging right" in err
    assert rewards(store) == {"right": (0.5, "judge"), "wrong": (None, None), "rated": (0.0, "log"),
                              "no-tool": (None, None), "thinking": (1.0, "judge")}
    feedback = {e["id"]: e["feedback"] for e in TraceStore.read(store).episodes()}
    assert feedback["right"]["metrics"] == {"length": float(len("It reads \\boxed{497}."))}  # numpy: a number
    # a metric that is no number is kept as text, as a training run's judge metrics are
    assert feedback["thinking"]["metrics"] == {} and feedback["thinking"]["text_metrics"] == {"note": "text"}

    # the config's own judge wants a dataset's ground truth, which a stored episode has not: one line, nothing written
    code, _, err = run_cli(["traces", "judge", str(store), "--conf", CONF, "--all"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the judge scored none of the 5 episodes" in err and "has no ground truth" in err
    assert rewards(store)["wrong"] == (None, None) and rewards(store)["right"] == (0.5, "judge")


def test_refusals(store, tmp_path, capsys):
    writer = TraceStore.open_for_writing(store)  # `astuner serve` writing it
    try:
        code, _, err = run_cli(["traces", "judge", str(store), "--conf", CONF, "--judge", JUDGE], capsys)
    finally:
        writer.close()
    assert code == 2 and "another process" in err and "writes to it" in err
    assert rewards(store)["right"] == (None, None)
    for argv, said in ((["--concurrency", "0"], "--concurrency must be at least 1"),
                       (["--judge", "nowhere.py->judge"], "nowhere.py")):
        code, _, err = run_cli(["traces", "judge", str(store), "--conf", CONF, *argv], capsys)
        assert code == 2 and said in err, err
    code, _, err = run_cli(["traces", "judge", str(tmp_path / "none.db"), "--conf", CONF], capsys)
    assert code == 2 and "no such file" in err
