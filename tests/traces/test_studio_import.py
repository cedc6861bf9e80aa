"""`astuner traces import` of AgentScope Studio's trace database: a real AgentScope `ReActAgent` (its own
OpenAIChatModel, the `read_sensor` tool) traced by AgentScope's OpenTelemetry exporter into Studio's `span_table`
(tests/traces/studio_sink.py, in both of Studio's attribute layouts), imported: each reply an episode of its two
model calls, the tool's result in the second's prompt, the ids those of the model's chat template; a failed call,
an unfinished trace and an import done twice are reported, not stored; a file that is no Studio database is one
line."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from astuner.records.trace_store import TraceStore
from tests.conftest import run_cli
from tests.evaluate.scripted_endpoint import KEY, ScriptedEndpoint
from tests.traces.studio_sink import StudioSink

SENSOR_TOOL = {"type": "function", "function": {"name": "read_sensor", "parameters": {"properties": {},
                                                                                       "type": "object"},
                                                "description": "Read the sensor the user asks about."}}
ASK = [{"role": "system", "content": "Call read_sensor, then answer in \\boxed{}."},
       {"role": "user", "content": "What does sensor S1 read?"}]


@pytest.fixture(scope="module")
def studio(tmp_path_factory) -> dict[str, Path]:
    """Studio's database in both layouts after the agent answered for readings 497 and 613, and failed once."""
    folder = tmp_path_factory.mktemp("studio")
    sink, endpoint = StudioSink(folder), ScriptedEndpoint()
    try:
        done = subprocess.run([sys.executable, str(Path(__file__).with_name("studio_agent.py")), sink.url,
                               endpoint.base_url, KEY, "497", "613", "--broken"],
                              capture_output=True, text=True, timeout=300)
    finally:
        endpoint.close()
        sink.close()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == ["The sensor reads \\boxed{497}.", "The sensor reads \\boxed{613}.",
                                           "broken: InternalServerError"]
    return sink.paths


def imported(source: Path, store: Path, model: Path, capsys, *extra: str) -> tuple[int, dict, str]:
    code, out, err = run_cli(["traces", "import", str(source), "--store", str(store), "--model", str(model),
                              "--json", *extra], capsys)
    return code, (json.loads(out) if code == 0 else {}), err


@pytest.mark.parametrize("layout", ["nested", "flat"])
def test_each_reply_is_an_episode_of_its_model_calls(studio, layout, tiny_model_dir, tokenizer, tmp_path, capsys):
    store = tmp_path / "traces.db"
    code, report, err = imported(studio[layout], store, tiny_model_dir, capsys)
    assert code == 0, err
    # 5 chat spans: two replies of two calls, and the failed call (its span's status is ERROR)
    assert (report["lines"], report["episodes"], report["calls"], report["rewards"]) == (5, 2, 4, 0)
    assert len(report["skipped"]) == 1 and "the call failed (its span's status is ERROR)" in report["skipped"][0]
    assert report["check"] == {"episodes": 2, "passed": 2, "causes": {}, "failed": []}
    assert "from 5 model-call spans" in err

    reader = TraceStore.read(store)
    episodes = reader.episodes()
    assert [(e["source"], e["calls"], e["reward"]) for e in episodes] == [("imported:studio", 2, None)] * 2
    readings = set()
    for episode in episodes:
        first, second = reader.calls(episode["id"])
        assert first.messages == ASK and first.tools == [SENSOR_TOOL]
        assert first.prompt_ids == tokenizer(tokenizer.apply_chat_template(
            ASK, tools=[SENSOR_TOOL], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False)["input_ids"]
        assert first.response_text == '<tool_call>\n{"name": "read_sensor", "arguments": {}}\n</tool_call>'
        assert first.response_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
        call, result = second.messages[2:]  # the tool call as the agent's memory kept it, then the tool's result
        assert call["role"] == "assistant" and call["tool_calls"][0]["function"] == {"name": "read_sensor",
                                                                                     "arguments": {}}
        assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
        assert second.messages[:2] == ASK
        assert second.response_text == f"The sensor reads \\boxed{{{result['content']}}}."
        readings.add(result["content"])
    assert readings == {"497", "613"}


def test_both_layouts_give_the_same_calls(studio, tiny_model_dir, tmp_path, capsys):
    bare = tmp_path / "bare.sqlite"  # a span_table without the operationName column: every span's attributes read
    shutil.copy(studio["flat"], bare)
    with sqlite3.connect(bare) as conn:
        conn.execute("ALTER TABLE span_table DROP COLUMN operationName")
    calls = {}
    for layout, database in (("nested", studio["nested"]), ("flat", studio["flat"]), ("bare", bare)):
        store = tmp_path / f"{layout}.db"
        assert imported(database, store, tiny_model_dir, capsys)[0] == 0
        reader = TraceStore.read(store)
        calls[layout] = [(e["id"], [(c.messages, c.tools, c.prompt_ids, c.response_ids) for c in reader.calls(e["id"])])
                         for e in reader.episodes()]
    assert calls["nested"] == calls["flat"] == calls["bare"] and len(calls["flat"]) == 2


def test_imported_again_only_what_is_new(studio, tiny_model_dir, tmp_path, capsys):
    database = tmp_path / "database.sqlite"
    shutil.copy(studio["flat"], database)
    with sqlite3.connect(database) as conn:  # one reply still running: its root span is not stored yet
        (trace,) = conn.execute("SELECT traceId FROM span_table WHERE statusCode = 1 AND "
                                "operationName = 'invoke_agent' LIMIT 1").fetchone()
        root = conn.execute("SELECT * FROM span_table WHERE traceId = ? AND operationName = 'invoke_agent'",
                            (trace,)).fetchone()
        conn.execute("DELETE FROM span_table WHERE traceId = ? AND operationName = 'invoke_agent'", (trace,))
    store = tmp_path / "traces.db"
    code, report, _ = imported(database, store, tiny_model_dir, capsys)
    assert code == 0 and (report["episodes"], report["calls"]) == (1, 2)
    unfinished = [s for s in report["skipped"] if f"its trace {trace} is not finished" in s]
    assert len(unfinished) == 2

    with sqlite3.connect(database) as conn:  # the reply finished: its root span arrives
        conn.execute(f"INSERT INTO span_table VALUES ({', '.join('?' * len(root))})", root)
    code, report, _ = imported(database, store, tiny_model_dir, capsys)
    assert code == 0 and (report["episodes"], report["calls"]) == (1, 2)
    assert sum("is in the store already" in s for s in report["skipped"]) == 1
    assert [e["id"] for e in TraceStore.read(store).episodes()].count(trace) == 1
    assert len(TraceStore.read(store).episodes()) == 2


def test_a_file_that_is_no_studio_database(tiny_model_dir, tmp_path, capsys):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE runs (id TEXT)")
    store = tmp_path / "traces.db"
    code, _, err = imported(other, store, tiny_model_dir, capsys)
    assert code == 2 and "without AgentScope Studio's span_table (tables: runs)" in err
    assert len(err.strip().splitlines()) == 1 and not store.exists()

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": ASK + [{"role": "assistant", "content": "hi"}]}) + "\n")
    code, _, err = imported(log, store, tiny_model_dir, capsys, "--format", "studio")
    assert code == 2 and "not a readable SQLite database" in err and not store.exists()
    code, report, err = imported(log, store, tiny_model_dir, capsys)  # auto: JSON lines
    assert code == 0 and report["episodes"] == 1, err


def test_span_shapes_the_agent_above_did_not_produce():
    from astuner.traces.studio import parse_span

    given = {"args": [[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]], "kwargs": {}}
    reply = [{"role": "assistant", "parts": [{"type": "reasoning", "content": "hmm"}, {"type": "text", "content": "a"},
                                              {"type": "tool_call", "id": "c9", "name": "read_sensor",
                                               "arguments": {"id": 3}}]}]
    flat_tool = {"type": "function", "name": "read_sensor", "parameters": {"type": "object", "properties": {}}}
    attrs = {"agentscope.function.input": json.dumps(given), "gen_ai.output.messages": reply,
             "gen_ai.tool.definitions": [flat_tool]}
    call, reasoning = parse_span(attrs, "t", "span s")
    assert reasoning == 1 and call.messages == [{"role": "user", "content": "hi"}]
    assert call.reply == {"role": "assistant", "content": "a", "tool_calls": [
        {"id": "c9", "type": "function", "function": {"name": "read_sensor", "arguments": {"id": 3}}}]}
    assert call.tools == [{"type": "function", "function": {"name": "read_sensor",
                                                            "parameters": {"type": "object", "properties": {}}}}]
    with pytest.raises(ValueError, match="structured-output call"):
        parse_span({**attrs, "agentscope.function.input": {**given, "kwargs": {"structured_model": "<class M>"}}},
                   "t", "span s")
    with pytest.raises(ValueError, match="part of type 'uri'"):
        parse_span({**attrs, "gen_ai.output.messages": [{"parts": [{"type": "uri", "uri": "x"}]}]}, "t", "span s")
    with pytest.raises(ValueError, match="no gen_ai.output.messages"):
        parse_span({"agentscope.function.input": given}, "t", "span s")


def test_a_trace_with_a_call_it_cannot_read_is_left_out_whole(studio, tiny_model_dir, tmp_path, capsys):
    database = tmp_path / "database.sqlite"
    shutil.copy(studio["nested"], database)
    with sqlite3.connect(database) as conn:
        span, trace = conn.execute("SELECT spanId, traceId FROM span_table WHERE operationName = 'chat' AND "
                                   "statusCode = 1 ORDER BY CAST(startTimeUnixNano AS INTEGER) LIMIT 1").fetchone()
        conn.execute("UPDATE span_table SET attributes = '{not json' WHERE spanId = ?", (span,))
    code, report, err = imported(database, tmp_path / "traces.db", tiny_model_dir, capsys)
    assert code == 0, err
    assert (report["lines"], report["episodes"], report["calls"]) == (5, 1, 2)
    assert f"span {span}: its attributes are no JSON object" in report["skipped"]
    assert any(f"episode {trace!r} left out whole (1 other calls)" in s for s in report["skipped"])
    assert trace not in [e["id"] for e in TraceStore.read(tmp_path / "traces.db").episodes()]
