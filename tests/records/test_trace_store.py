"""The trace store: calls round-trip token for token, WAL with a reader beside the writer, one writer, the schema
version, files that are no store, a call written whole (its episode's row with it) or not at all."""

from __future__ import annotations

import os
import sqlite3
import subprocess
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


def _open_and_hold(path: str, go, results) -> None:
    """One of several processes opening the store at once: whether it became the writer."""
    import time as _time

    go.wait()
    try:
        store = TraceStore.open_for_writing(path)
    except DataError:
        results.put(False)
        return
    results.put(True)
    _time.sleep(1.0)  # held while the others try
    store.close()


def test_one_writer_among_concurrent_openers_of_a_crashed_writers_store(tmp_path):
    """Four processes open a store whose lock a dead writer left (its pid, or an empty file) at the same moment,
    15 times: exactly one becomes the writer each time (an OS file lock, not a pid check then an unlink)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    path = tmp_path / "t.db"
    TraceStore.open_for_writing(path).close()
    for trial in range(15):
        (tmp_path / "t.db.writer").write_text("" if trial % 3 == 0 else "999999999")
        go, results = context.Event(), context.Queue()
        procs = [context.Process(target=_open_and_hold, args=(str(path), go, results)) for _ in range(4)]
        for proc in procs:
            proc.start()
        go.set()
        won = [results.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        assert sum(won) == 1, (trial, won)
    assert not (tmp_path / "t.db.writer").exists()  # the last writer's close removed it


def _bytes(path) -> bytes:
    return path.read_bytes()


def test_a_file_refused_is_left_untouched(tmp_path):
    """Another program's database (with a `meta` table of its own), a store of a newer version, a store without a
    schema version and a damaged store: each is refused, byte for byte as it was and with no journal beside it."""
    foreign = tmp_path / "app.db"
    conn = sqlite3.connect(foreign)
    conn.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); CREATE TABLE users (name TEXT);"
                       "INSERT INTO meta VALUES ('app', 'x');")
    conn.commit()
    conn.close()
    newer = tmp_path / "newer.db"
    store = TraceStore.open_for_writing(newer)
    store.add_call("e1", record(0))
    store.close()
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    unversioned = tmp_path / "unversioned.db"
    conn = sqlite3.connect(unversioned)
    conn.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);")
    conn.close()
    damaged = tmp_path / "damaged.db"
    store = TraceStore.open_for_writing(damaged)
    for n in range(300):
        store.add_call(f"e{n}", record(n))
    store.close()
    conn = sqlite3.connect(damaged)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    data = bytearray(damaged.read_bytes())
    page = 4096 * 5  # a page of the calls' b-tree: overwritten
    data[page:page + 4096] = b"\xa5" * 4096
    damaged.write_bytes(bytes(data))

    for path, why in [(foreign, "another program's SQLite database"), (newer, "newer than this astuner's"),
                      (unversioned, "no schema version"), (damaged, "the file is damaged")]:
        before = _bytes(path)
        with pytest.raises(DataError, match=why):
            TraceStore.open_for_writing(path)
        assert _bytes(path) == before, path
        assert not path.with_name(path.name + "-wal").exists() and not path.with_name(path.name + ".writer").exists()


def test_a_store_on_read_only_media_is_read(tmp_path):
    """A store on a read-only mount (root) or in a folder the reader may not write (others): WAL readers need a
    shared-memory file beside it, which they cannot make there; the file is read as it is."""
    media = tmp_path / "media"
    media.mkdir()
    store = TraceStore.open_for_writing(media / "t.db")
    store.add_call("e1", record(0))
    store.add_feedback("e1", 1.0)
    store.close()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "--bind", "-o", "ro", str(media), str(media)],
                                                   capture_output=True).returncode == 0
    if mounted:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(media)], capture_output=True)
    else:
        media.chmod(0o555)
    try:
        assert not os.access(media, os.W_OK)
        reader = TraceStore.read(media / "t.db")
        assert [(e["id"], e["calls"], e["reward"]) for e in reader.episodes()] == [("e1", 1, 1.0)]
        assert reader.calls("e1") == [record(0)]
        reader.close()
    finally:
        if mounted:  # busy while a connection of the store's is still open: said, and unmounted anyway
            busy = subprocess.run(["umount", str(media)], capture_output=True).returncode != 0
            if busy:
                subprocess.run(["umount", "-l", str(media)], capture_output=True)
            assert not busy, "a connection of the store's was left open"
        else:
            media.chmod(0o755)


def test_a_write_is_acknowledged_once_committed_and_a_reward_must_be_finite(tmp_path):
    store = TraceStore.open_for_writing(tmp_path / "t.db")
    reader = TraceStore.read(tmp_path / "t.db")
    store.add_call("e1", record(0)).result(timeout=60)
    assert [e["calls"] for e in reader.episodes()] == [1]  # done: committed, a reader sees it (no flush)
    store.add_feedback("e1", 0.5, {"note": "ok"}).result(timeout=60)
    assert reader.feedback("e1") == [{"created": pytest.approx(reader.feedback("e1")[0]["created"]), "reward": 0.5,
                                      "metadata": {"note": "ok"}}]
    # the metadata is stored once (in the feedback row); the episode reads it from there
    assert reader._conn.execute("SELECT feedback FROM episodes").fetchall() == [(None,)]
    assert reader.episodes()[0]["feedback"] == {"note": "ok"}
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(DataError, match="not a finite number; nothing was recorded"):
            store.add_feedback("e1", bad)
    done = store.add_episode("e2", [record(1), record(2)], "imported:openai", 1.0, {"from": "log"})
    done.result(timeout=60)
    assert [(e["id"], e["calls"], e["reward"]) for e in reader.episodes()] == [("e1", 1, 0.5), ("e2", 2, 1.0)]
    store.flush()  # nothing failed: later writes go on
    store.close()


def test_an_episode_is_written_whole_or_not_at_all_and_a_failed_write_fails_every_later_one(tmp_path):
    store = TraceStore.open_for_writing(tmp_path / "t.db")
    broken = replace(record(1), messages=[{"role": "user", "content": object()}])
    failed = store.add_episode("e1", [record(0), broken], "imported:openai", 1.0)
    with pytest.raises(DataError, match="a write failed"):
        failed.result(timeout=60)
    later = store.add_call("e2", record(2))
    with pytest.raises(DataError, match="a write failed"):
        later.result(timeout=60)
    store.close()
    reader = TraceStore.read(tmp_path / "t.db")
    assert reader.episodes() == [] and reader._conn.execute("SELECT COUNT(*) FROM feedback").fetchone() == (0,)


def test_a_lock_whose_file_the_last_writer_removed_meanwhile_is_taken_again_at_the_path(tmp_path, monkeypatch):
    """An opener that opened FILE.writer just before the writer holding it closed (and removed it) locks a file no
    longer at the path: it must lock the one at the path instead, or a third opener would become a second writer."""
    import fcntl

    path = tmp_path / "t.db"
    lock = tmp_path / "t.db.writer"
    real = fcntl.flock
    removed = []

    def flock(fd, op):
        if not removed and op & fcntl.LOCK_EX:  # the writer before closes between this open and this lock
            removed.append(fd)
            lock.unlink()
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    first = TraceStore.open_for_writing(path)
    monkeypatch.setattr(fcntl, "flock", real)
    assert removed and lock.is_file()
    with pytest.raises(DataError, match=r"another process \(pid \d+\) writes to it"):
        TraceStore.open_for_writing(path)
    first.close()
