"""The viewer's routes on a run the tiny demo trained: curves, a step's episodes and groups, one episode token
by token; everything else (path traversal included) is 404; the server binds 127.0.0.1 unless told."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

from astuner.records.tokens import read_token_records
from astuner.viewer import start_viewer
from tests.viewer.conftest import STEPS


@pytest.fixture
def server(viewer):
    return viewer


def get(server, path: str, method: str = "GET") -> tuple[int, str, bytes]:
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request(method, path)  # sent as written: no client-side normalisation of "..", "%2e"
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, response.getheader("Content-Type"), body


def trained_step(run: Path) -> tuple[int, dict]:
    """A step and one of its samples the trainer updated on (it has trainer log-probs)."""
    for path in sorted((run / "trajectories").glob("step_*.tokens.jsonl.gz")):
        for record in read_token_records(path):
            if record["trainer_logprobs"]:
                return int(path.name.split("_")[1].split(".")[0]), record
    raise AssertionError("no trained sample recorded")


def test_binds_loopback_by_default(server):
    assert server.server_address[0] == "127.0.0.1"
    assert server.url.startswith("http://127.0.0.1:")


def test_page_and_its_files_are_served(server):
    status, kind, body = get(server, "/")
    assert status == 200 and kind.startswith("text/html") and b"/static/app.js" in body
    for name, kind_prefix in (("app.js", "text/javascript"), ("style.css", "text/css")):
        status, kind, body = get(server, f"/static/{name}")
        assert status == 200 and kind.startswith(kind_prefix) and body
    assert b"cdn" not in get(server, "/")[2].lower()  # nothing from the network
    assert get(server, "/", "HEAD")[0] == 200


def test_run_route_has_every_step_and_the_curves(server, tiny_run):
    status, _, body = get(server, "/api/run")
    run = json.loads(body)
    assert status == 200 and run["name"] == "tiny_cpu" and run["live"] is False
    assert run["steps"] == list(range(1, STEPS + 1))
    trained = [row for row in run["metrics"] if "reward/mean" in row]
    assert [row["step"] for row in trained] == list(range(1, STEPS + 1))
    assert {"reward/mean", "reward/success_rate", "rollout/error_rate", "rollout/madness_rate",
            "rollout/truncated_rate", "actor/clip_frac"} <= set(run["curves"])


def test_step_route_lists_episodes_with_their_grpo_groups(server, tiny_run):
    status, _, body = get(server, "/api/step/5")
    step = json.loads(body)
    rows = [json.loads(line) for line in (tiny_run / "trajectories" / "step_5.jsonl").read_text().splitlines()]
    assert status == 200 and len(step["episodes"]) == len(rows)
    first = step["episodes"][0]
    assert set(first) >= {"task_id", "repeat_index", "episode_uuid", "reward", "advantage", "is_success", "failed",
                          "madness", "truncated", "calls", "tool_errors", "tokens"}
    # tool calls that did not parse, per episode, as the trajectories count them
    assert [e["tool_errors"] for e in step["episodes"]] == [r["tool_parse_failures"] for r in rows]
    for task, group in step["groups"].items():
        rewards = [r["reward"] for r in rows if r["task_id"] == task]
        assert group["n"] == len(rewards) and group["mean"] == pytest.approx(sum(rewards) / len(rewards))


def test_episode_route_carries_tokens_masks_and_both_logprobs(server, tiny_run):
    step, record = trained_step(tiny_run)
    status, _, body = get(server, f"/api/episode/{step}/{record['episode_uuid']}")
    episode = json.loads(body)
    assert status == 200 and episode["episode"]["episode_uuid"] == record["episode_uuid"]
    sample = episode["samples"][record["sample"]]
    n = len(sample["input_ids"])
    assert len(sample["pieces"]) == len(sample["loss_mask"]) == len(sample["rollout_logprobs"]) == n
    assert sample["loss_mask"][: sample["prompt_length"]] == [0] * sample["prompt_length"]
    trained = [i for i, m in enumerate(sample["loss_mask"]) if m]
    assert trained
    for i in trained:  # the trainer's old-policy log-probs reproduce the engine's (same weights, top_p 1)
        assert sample["trainer_logprobs"][i] == pytest.approx(sample["rollout_logprobs"][i], abs=1e-3)
    assert all(sample["rollout_logprobs"][i] is None for i in range(n) if not sample["loss_mask"][i])


@pytest.mark.parametrize("path", [
    "/static/../config.yaml", "/static/..%2fconfig.yaml", "/%2e%2e/config.yaml", "/../../etc/passwd",
    "/config.yaml", "/trajectories/step_1.jsonl", "/static/index.html/../../metrics.jsonl", "/api/step/../config",
    "/api/episode/1/..%2f..%2fconfig.yaml", "/api/step/99999", "/api/episode/1/no-such-episode", "/static/",
])
def test_nothing_outside_the_routes_is_served(server, path):
    status, _, body = get(server, path)
    assert status == 404
    assert b"project_name" not in body and b"root:" not in body


def test_other_hosts_get_a_warning_and_a_missing_folder_a_clear_error(tiny_run, tmp_path):
    from loguru import logger

    from astuner.errors import UserError

    lines = []
    sink = logger.add(lines.append, level="WARNING")
    try:
        viewer = start_viewer(tiny_run, host="0.0.0.0")
        viewer.shutdown()
        viewer.server_close()
    finally:
        logger.remove(sink)
    assert any("anyone who can reach it" in str(line) for line in lines)
    with pytest.raises(UserError, match="not a run folder"):
        start_viewer(tmp_path / "missing")


def test_view_command_reports_a_missing_run(capsys, tmp_path):
    from astuner.cli import main

    assert main(["view", str(tmp_path / "nope")]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_a_failed_episode_is_served_with_its_traceback(tmp_path):
    from astuner.records.metrics import write_trajectories

    run = tmp_path / "failing_run"
    (run / "trajectories").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.0, "rollout/error_rate": 1.0}) + "\n")
    trace = 'Traceback (most recent call last):\n  File "agent.py", line 3\nRuntimeError: tool crashed'
    write_trajectories(run / "trajectories", 1, [{
        "task_id": "t0", "repeat_index": 0, "episode_uuid": "abc123", "reward": 0.0, "is_success": False,
        "advantage": None, "failed": True, "error": trace, "madness": [], "truncated": False,
        "messages": [{"role": "user", "content": "hi"}], "response": None, "calls": 0, "samples": []}])
    viewer = start_viewer(run)
    try:
        step = json.loads(get(viewer, "/api/step/1")[2])
        assert step["episodes"][0]["failed"] is True and step["groups"]["t0"]["n"] == 1
        episode = json.loads(get(viewer, "/api/episode/1/abc123")[2])
        assert episode["episode"]["error"] == trace and episode["samples"] == []
        assert json.loads(get(viewer, "/api/run")[2])["steps"] == [1]
    finally:
        viewer.shutdown()
        viewer.server_close()


def _get_with_host(server, host_header: str) -> int:
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.putrequest("GET", "/api/run", skip_host=True)
    conn.putheader("Host", host_header)
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


def test_a_request_for_another_host_is_refused(server):
    """DNS rebinding: a web page whose name now resolves to 127.0.0.1 sends its own name as Host."""
    port = server.server_address[1]
    assert _get_with_host(server, "evil.example") == 403
    assert _get_with_host(server, f"evil.example:{port}") == 403
    for allowed in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        assert _get_with_host(server, allowed) == 200, allowed


@pytest.mark.parametrize("content", ["7\n", "[1, 2]\n", '{"step": 1, "reward/mean": NaN}\n', '{"step": 1, "rew'])
def test_a_broken_metrics_file_gets_an_answer_not_a_dropped_connection(tiny_run, tmp_path, content):
    import shutil

    run = tmp_path / "broken"
    shutil.copytree(tiny_run, run)
    (run / "metrics.jsonl").write_text(content)
    viewer = start_viewer(run)
    try:
        status, kind, body = get(viewer, "/api/run")
        assert status in (200, 500) and kind.startswith("application/json")
        json.loads(body)  # an answer the page can read, whatever the file held
        assert get(viewer, "/")[0] == 200  # the other routes keep working
    finally:
        viewer.shutdown()
        viewer.server_close()


@pytest.mark.parametrize("argv", [["view", "RUN", "--port", "70000"], ["view", "RUN", "--port", "-5"],
                                  ["--conf", "x.yaml", "--with-logview", "--logview-port", "70000"]])
def test_a_port_out_of_range_is_one_line_exit_2(capsys, tiny_run, argv):
    from astuner.cli import main

    code = main([str(tiny_run) if a == "RUN" else a for a in argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    # one line for the port; the training form says the missing x.yaml too, on a line of its own (every problem)
    assert code == 2 and sum("is not a port; use 0 (any free port) to 65535" in line for line in lines) == 1
    assert len(lines) == (3 if "--conf" in argv else 1) and all(line.startswith("astuner: error: ") for line in lines)
    assert "--conf" not in argv or lines[0] == "astuner: error: 2 problems:"


def _first_episode(run: Path) -> tuple[int, str]:
    step = 1
    row = json.loads((run / "trajectories" / f"step_{step}.jsonl").read_text().splitlines()[0])
    return step, row["episode_uuid"]


def _damage(path: Path, how: str) -> None:
    import gzip

    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"\x00\xff not json \xfe" * 50)
    elif how == "scalar-rows":
        path.write_bytes(gzip.compress(b"7\n[1, 2]\nnull\n") if path.suffix == ".gz" else b"7\n[1, 2]\nnull\n")
    elif how == "nan-row":
        rows = gzip.decompress(data) if path.suffix == ".gz" else data
        text = rows.decode().splitlines()[0].replace('"reward": ', '"reward": NaN, "was": ', 1)
        text = text.replace('"sample": ', '"sample": NaN, "was": ', 1)
        path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())


@pytest.mark.parametrize("how", ["truncated", "garbage", "scalar-rows", "nan-row"])
@pytest.mark.parametrize("which", ["step_1.jsonl", "step_1.tokens.jsonl.gz"])
def test_a_broken_trajectory_file_gets_an_answer_naming_it(tiny_run, tmp_path, which, how):
    """Was: the connection dropped with no HTTP answer. Now every route answers JSON: what could be read (200),
    or a 500 that names the file; the other steps keep working."""
    import shutil

    run = tmp_path / "broken"
    shutil.copytree(tiny_run, run)
    step, uuid = _first_episode(run)
    _damage(run / "trajectories" / which, how)
    viewer = start_viewer(run)
    try:
        for route in ("/api/run", f"/api/step/{step}", f"/api/episode/{step}/{uuid}"):
            status, kind, body = get(viewer, route)
            assert kind.startswith("application/json"), (route, status, body[:200])
            answer = json.loads(body)
            assert status in (200, 404, 500), (route, status)
            if status == 500:
                assert which in answer["error"], answer
        assert get(viewer, "/api/step/2")[0] == 200  # the other steps keep working
    finally:
        viewer.shutdown()
        viewer.server_close()


def test_two_hundred_concurrent_requests_are_all_answered(server):
    """Was: 9 of 200 got no answer within 60 s (the standard library's listen backlog of 5)."""
    import threading

    start = threading.Barrier(200)
    answers: list = []

    def fetch() -> None:
        start.wait()
        try:
            answers.append(get(server, "/api/run")[0])
        except OSError as exc:
            answers.append(repr(exc))

    threads = [threading.Thread(target=fetch) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == [200] * 200, [a for a in answers if a != 200][:5]


def test_the_validation_before_the_warm_start_is_a_curve(tmp_path):
    """Step 0's first validation (before the warm start) was in neither the viewer nor reward_curve.png."""
    from astuner.records.metrics import plot_reward_curve
    from astuner.viewer.data import RunData

    rows = [{"step": 0, "sft/val_reward_before": 0.0, "val/reward_mean": 0.3},
            {"step": 1, "reward/mean": 0.4}, {"step": 2, "reward/mean": 0.6, "val/reward_mean": 0.7}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = RunData(tmp_path).run()
    assert "sft/val_reward_before" in run["curves"]
    assert run["metrics"][0]["sft/val_reward_before"] == 0.0
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    drawn: list = []
    original = pyplot.Axes.plot

    def plot(self, *args, **kwargs):
        drawn.append(kwargs.get("label"))
        return original(self, *args, **kwargs)

    pyplot.Axes.plot = plot
    try:
        assert plot_reward_curve(rows, tmp_path / "curve.png", "t") == tmp_path / "curve.png"
    finally:
        pyplot.Axes.plot = original
    assert "val before the warm start" in drawn and (tmp_path / "curve.png").stat().st_size > 1000


def test_a_multi_agent_episode_carries_every_agents_turns(multi_agent_run):
    """Was: the episode row held the last call only (the guesser's), so the viewer showed one of three agents."""
    row = json.loads((multi_agent_run / "trajectories" / "step_1.jsonl").read_text().splitlines()[0])
    viewer = start_viewer(multi_agent_run)
    try:
        status, _, body = get(viewer, f"/api/episode/1/{row['episode_uuid']}")
    finally:
        viewer.shutdown()
        viewer.server_close()
    episode = json.loads(body)["episode"]
    assert status == 200
    turns = episode["conversations"]
    assert [t["agent"] for t in turns] == ["hinter", "noise", "guesser"]  # in the order they spoke
    assert [t["policy"] for t in turns] == ["hinter", "noise", "guesser"]
    assert turns[0]["messages"][0]["content"].startswith("Secret is ") and turns[1]["messages"][0]["content"] == \
        "Say any digit ."
    hint, said = turns[0]["response"], turns[1]["response"]
    assert turns[2]["messages"][0]["content"] == f"Hint is {hint} . Noise is {said} . Name the secret ."


def test_an_agent_that_keeps_its_history_is_one_conversation():
    from astuner.schema.calls import CallRecord, conversations

    def call(agent, *texts):
        messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
        return CallRecord(agent, messages, None, "", [], [], [], "stop", "reply")

    react = [call("a", "q"), call("a", "q", "r1", "tool"), call("a", "q", "r1", "tool", "r2", "tool")]
    assert conversations(react) == [react[2]]  # its last call holds the whole conversation
    debate = [call("a", "q"), call("b", "q"), call("a", "q", "r1", "b said"), call("b", "fresh start")]
    assert conversations(debate) == [debate[1], debate[2], debate[3]]
