"""`astuner view` on a trace store: its episodes as one step (reward, calls, tokens, the conversation), an id the
URLs cannot carry under an alias, a file that is no store refused in one line."""

from __future__ import annotations

import json

import pytest

from astuner.errors import UserError
from astuner.records.trace_store import TraceStore
from astuner.schema.calls import CallRecord
from astuner.viewer import start_viewer
from tests.viewer.test_server import get


def call(question: str, reply: str, finish: str = "stop") -> CallRecord:
    return CallRecord("agent", [{"role": "user", "content": question}], None, "p", [1, 2], [3, 4, 5], [-0.1] * 3,
                      finish, reply)


def test_the_viewer_opens_a_trace_store(tmp_path):
    store = TraceStore.open_for_writing(tmp_path / "traces.db")
    store.add_call("ticket-1", call("What does S1 read?", "<tool_call>"))
    store.add_call("ticket-1", call("What does S1 read?", "\\boxed{497}"))
    store.add_call("has space/and slash", call("hi", "hello", "length"))
    store.add_feedback("ticket-1", 1.0, {"by": "user"})
    store.close()
    server = start_viewer(tmp_path / "traces.db")
    try:
        status, _, body = get(server, "/api/run")
        assert status == 200 and json.loads(body)["steps"] == [1] and json.loads(body)["labels"] == {"1": "2 episodes"}
        status, _, body = get(server, "/api/step/1")
        rows = {r["episode_uuid"]: r for r in json.loads(body)["episodes"]}
        assert set(rows) == {"ticket-1", "e1"}  # the id a URL cannot carry: its alias
        assert (rows["ticket-1"]["reward"], rows["ticket-1"]["calls"], rows["ticket-1"]["tokens"]) == (1.0, 2, 6)
        assert rows["e1"]["reward"] is None and rows["e1"]["truncated"] is True
        status, _, body = get(server, "/api/episode/1/e1")
        episode = json.loads(body)["episode"]
        assert status == 200 and episode["episode"] == "has space/and slash" and episode["response"] == "hello"
        status, _, body = get(server, "/api/episode/1/ticket-1")
        assert json.loads(body)["episode"]["metadata"] == {"feedback": {"by": "user"}}
        assert get(server, "/api/step/2")[0] == 404
    finally:
        server.shutdown()
        server.server_close()
    (tmp_path / "notes.txt").write_text("no store")
    with pytest.raises(UserError, match="is a file but no trace store"):
        start_viewer(tmp_path / "notes.txt")
