"""The trace store: calls round-trip token for token, WAL with a reader beside the writer, one writer, the schema
version, files that are no store, a call written whole (its episode's row with it) or not at all."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from astuner.errors import DataError
from astuner.records.trace_store import SCHEMA_VERSION, TraceStore
from astuner.schema.calls import CallRecord


def record(n: int) -> CallRecord:
    return CallRecord(target="agent", messages=[{"role": "user", "content": f"q{n} ✓"}], tools=None,
                      prompt_text=f"<q{n}>", prompt_ids=[1, 2, 70000 + n], response_ids=[5, 2 ** 31 + n],
                      logprobs=[-0.25, -1.5], finish_reason="stop", response_text=f"a{n}",
                      tool_call_errors=["bad call"], usage={}, sampling={"temperature": 0.7, "top_p": 1.0})


def test_calls_round_trip_and_a_reader_sees_them_while_the_writer_writes(tmp_path):
    store = TraceStore.open_for_writing(tmp_path / "t.db", "m")
    for n in range(3):
        store.add_call("e1", record(n))
    store.add_call("e2", record(9))
    store.flush()
    reader = TraceStore.read(tmp_path / "t.db")
    assert reader._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [(e["id"], e["calls"], e["reward"]) for e in reader.episodes()] == [("e1", 3, None), ("e2", 1, None)]
    assert reader.calls("e1") == [record(n) for n in range(3)]  # ids past 2**16 and 2**31, text, errors: whole
    store.add_feedback("e1", -1.0, {"note": "wrong"})
    store.flush()
    assert reader.episodes()[0]["reward"] == -1.0 and reader.episodes()[0]["feedback"] == {"note": "wrong"}
    store.close()
    # opened again, a new episode's calls and an old one's continue their numbering
    store = TraceStore.open_for_writing(tmp_path / "t.db", "m")
    store.add_call("e2", record(10))
    store.flush()
    assert [c.response_text for c in TraceStore.read(tmp_path / "t.db").calls("e2")] == ["a9", "a10"]
    store.close()


def test_one_writer_a_stale_lock_and_files_that_are_no_store(tmp_path):
    store = TraceStore.open_for_writing(tmp_path / "t.db")
    with pytest.raises(DataError, match=r"another process \(pid \d+\) writes to it"):
        TraceStore.open_for_writing(tmp_path / "t.db")
    store.close()
    (tmp_path / "t.db.writer").write_text("999999999")  # a writer that died
    TraceStore.open_for_writing(tmp_path / "t.db").close()

    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(DataError, match="newer than this astuner's"):
        TraceStore.read(tmp_path / "t.db")
    with pytest.raises(DataError, match="newer than this astuner's"):
        TraceStore.open_for_writing(tmp_path / "t.db")
    assert not (tmp_path / "t.db.writer").exists()  # a refused open leaves no lock

    (tmp_path / "notes.txt").write_text("not a database")
    with pytest.raises(DataError, match="not a trace store"):
        TraceStore.open_for_writing(tmp_path / "notes.txt")
    assert not (tmp_path / "notes.txt.writer").exists()
    with pytest.raises(DataError, match="no such file"):
        TraceStore.read(tmp_path / "missing.db")
    with pytest.raises(DataError, match="does not exist"):
        TraceStore.open_for_writing(tmp_path / "no" / "t.db")


def test_a_write_that_fails_is_said_at_the_next_not_a_hung_flush(tmp_path):
    store = TraceStore.open_for_writing(tmp_path / "t.db")
    store.add_call("e1", record(0))
    store.add_feedback("e1", 1.0, {"metric": object()})  # no JSON: the writer thread must survive to say so
    with pytest.raises(DataError, match="a write failed"):
        store.flush(timeout_s=60)
    store.close()
    assert TraceStore.read(tmp_path / "t.db").episodes()[0]["reward"] is None  # the failed feedback not half-written


def test_a_call_is_one_transaction_its_episode_row_with_it(tmp_path):
    """A call and its episode's row are written together or not at all: a call that fails to be written (here its
    messages hold no JSON) leaves no episode without calls behind, and an earlier episode's `updated` as it was."""
    store = TraceStore.open_for_writing(tmp_path / "t.db")
    store.add_call("e1", record(0))
    store.flush()
    reader = TraceStore.read(tmp_path / "t.db")
    before = reader.episodes()
    broken = replace(record(1), messages=[{"role": "user", "content": object()}])
    store.add_call("e1", broken)  # an episode that exists: its row is updated in the call's transaction
    with pytest.raises(DataError, match="a write failed"):
        store.flush(timeout_s=60)
    store.close()
    assert reader.episodes() == before  # e1's `updated` untouched, its one call only

    store = TraceStore.open_for_writing(tmp_path / "new.db")
    store.add_call("e2", broken)  # a new episode: its row is created in the call's transaction
    with pytest.raises(DataError, match="a write failed"):
        store.flush(timeout_s=60)
    store.close()
    assert TraceStore.read(tmp_path / "new.db").episodes() == []
