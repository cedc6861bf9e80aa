"""The trace store: model calls recorded outside training (`astuner serve`), token for token, grouped into episodes,
with the rewards given to them afterwards. One SQLite file (Python's sqlite3: a real database that any SQLite
client reads, with transactions, WAL journaling and no server to run, rather than a file format of our own).

Writing: one writer per store, a thread of its own fed by a queue, so the server's loop never waits on the disk
and every call is one transaction (a reader never sees half a call); each write returns a future done once its
transaction is committed, so that a reply, a feedback's `"recorded": true` or an import's success is said only of
rows on disk (WAL with `synchronous = NORMAL`: a commit survives the process being killed). Once a write fails (a
full disk), that write's future and every later one fail with `StoreFailed`. Reading: any number of readers, each
with its own connection, while the writer writes (WAL); a store on read-only media is read as it is.

Opening: `open_for_writing` takes the store's writer lock, an OS file lock (`flock`) on a file beside it
(`FILE.writer`, holding the writer's pid for the message): the OS frees it when its holder dies, so a crashed
writer's lock (a pid, or an empty file) is taken over and two openers can never both write. It then checks the
file read-only — SQLite, `PRAGMA quick_check`, this schema's tables and columns, its version — before anything
is written to it (WAL journaling is a write): another program's database, a newer version or a damaged file is
refused untouched.

Schema (version 1, `meta.schema_version`; a newer file is refused, not misread):

- `meta(key TEXT PRIMARY KEY, value TEXT)`: `schema_version`, `created` (UNIX seconds), `model` (what served).
- `episodes(id TEXT PRIMARY KEY, created REAL, updated REAL, source TEXT, model TEXT, reward REAL, feedback TEXT)`:
  an episode is a client's session (its `X-Session-Id`), or one call that named none; `source` is `served`
  (or `imported:<format>`), `reward` the last feedback's (NULL before any), `feedback` its metadata as JSON.
- `calls(episode_id TEXT, seq INTEGER, agent TEXT, created REAL, messages TEXT, tools TEXT, prompt_text TEXT,
  prompt_ids BLOB, response_ids BLOB, logprobs BLOB, finish_reason TEXT, response_text TEXT,
  tool_call_errors TEXT, usage TEXT, sampling TEXT, PRIMARY KEY (episode_id, seq))`: a `CallRecord` whole;
  token ids are little-endian uint32 and log-probs little-endian float32 (`array`), JSON columns hold JSON text
  (`sampling`: the temperature and top-p the reply was sampled at, which its log-probs are of).
- `feedback(id INTEGER PRIMARY KEY, episode_id TEXT, created REAL, reward REAL, metadata TEXT)`: every reward
  given, in order (the episode's `reward` is the last).
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import queue
import sqlite3
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any, Optional

from astuner.errors import DataError
from astuner.records.store_file import (SCHEMA_VERSION, WriterLock, check_before_writing, check_schema, check_version,
                                        connect)
from astuner.schema.calls import CallRecord

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS episodes (id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL,
    source TEXT NOT NULL, model TEXT, reward REAL, feedback TEXT);
CREATE TABLE IF NOT EXISTS calls (episode_id TEXT NOT NULL REFERENCES episodes(id), seq INTEGER NOT NULL,
    agent TEXT NOT NULL, created REAL NOT NULL, messages TEXT NOT NULL, tools TEXT, prompt_text TEXT NOT NULL,
    prompt_ids BLOB NOT NULL, response_ids BLOB NOT NULL, logprobs BLOB NOT NULL, finish_reason TEXT NOT NULL,
    response_text TEXT NOT NULL, tool_call_errors TEXT NOT NULL, usage TEXT NOT NULL, sampling TEXT NOT NULL,
    PRIMARY KEY (episode_id, seq));
CREATE TABLE IF NOT EXISTS feedback (id INTEGER PRIMARY KEY AUTOINCREMENT, episode_id TEXT NOT NULL
    REFERENCES episodes(id), created REAL NOT NULL, reward REAL NOT NULL, metadata TEXT);
"""


def _ids(values: list[int]) -> bytes:
    packed = array("I", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _unids(blob: bytes, code: str = "I") -> list[Any]:
    packed = array(code)
    packed.frombytes(blob)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()


def _floats(values: list[float]) -> bytes:
    packed = array("f", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


class StoreFailed(DataError):
    """A write to the store failed (a full disk, the file gone): nothing more is recorded."""


def _finite(reward: float, episode: str) -> None:
    """A reward the store takes: a finite number (NaN would fail its write and every later one; inf trains nan)."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise DataError(f"episode {episode!r}: reward {reward!r} is not a finite number; nothing was recorded")


class TraceStore:
    """A store opened for reading (`TraceStore.read(path)`), or for writing (`open_for_writing`), whose writes go
    through `add_call` / `add_feedback` to its writer thread; `flush()` waits until they are on disk."""

    def __init__(self, path: Path, conn: sqlite3.Connection, writer: bool):
        self.path, self._conn, self.writer = path, conn, writer
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._lock: Optional[WriterLock] = None
        self.error: Optional[BaseException] = None  # the writer's failure (a full disk): later writes fail with it
        self._seq: dict[str, int] = {}  # episode -> its next call's seq (this writer's)

    # -- opening -------------------------------------------------------------------------------------------------
    @classmethod
    def open_for_writing(cls, path: Path | str, model: str = "") -> "TraceStore":
        path = Path(path)
        if not path.name or path.is_dir():
            raise DataError(f"--store {path}: a folder, not a file; name the store's file in it "
                            f"(traces.db)")
        if path.parent and not path.parent.is_dir():
            raise DataError(f"--store {path}: its folder {path.parent} does not exist")
        lock = WriterLock(path)
        lock.take()
        try:
            check_before_writing(path)  # read-only: nothing is written to a file refused here
            conn = connect(path, readonly=False)
        except DataError:
            lock.release()
            raise
        try:
            conn.executescript(SCHEMA)
            found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if found is None:
                conn.executemany("INSERT INTO meta VALUES (?, ?)", [("schema_version", str(SCHEMA_VERSION)),
                                                                    ("created", str(time.time())), ("model", model)])
                conn.commit()
            check_version(conn, path)
        except (sqlite3.DatabaseError, DataError) as exc:
            conn.close()
            lock.release()
            if isinstance(exc, DataError):
                raise
            raise DataError(f"--store {path}: not a trace store ({exc})") from None
        store = cls(path, conn, writer=True)
        store._lock = lock
        store._seq = dict(conn.execute("SELECT episode_id, MAX(seq) + 1 FROM calls GROUP BY episode_id").fetchall())
        store._thread = threading.Thread(target=store._write_forever, name="astuner-trace-store", daemon=True)
        store._thread.start()
        return store

    @classmethod
    def read(cls, path: Path | str) -> "TraceStore":
        path = Path(path)
        if not path.is_file():
            raise DataError(f"trace store {path}: " + ("a folder, not a trace store's file" if path.is_dir() else
                                                       "not a file" if path.exists() else "no such file"))
        conn = connect(path, readonly=True)
        try:
            if not check_schema(conn, path):
                raise DataError(f"trace store {path}: an SQLite file without a trace store's tables")
        except DataError:
            conn.close()
            raise
        return cls(path, conn, writer=False)

    # -- writing (through the writer thread) -----------------------------------------------------------------------
    def add_call(self, episode: str, record: CallRecord, source: str = "served", model: str = ""
                 ) -> concurrent.futures.Future:
        """Queue one call of `episode` (created with it when new); the future is done once it is committed."""
        seq = self._seq.get(episode, 0)
        self._seq[episode] = seq + 1
        return self._put("call", episode, seq, record, source, model, time.time())

    def add_feedback(self, episode: str, reward: float, metadata: Optional[dict[str, Any]] = None
                     ) -> concurrent.futures.Future:
        _finite(reward, episode)
        return self._put("feedback", episode, float(reward), metadata, time.time())

    def add_episode(self, episode: str, records: list[CallRecord], source: str, reward: Optional[float] = None,
                    metadata: Optional[dict[str, Any]] = None) -> concurrent.futures.Future:
        """A whole episode (its calls, and its reward when given) in one transaction."""
        if reward is not None:
            _finite(reward, episode)
        first = self._seq.get(episode, 0)
        self._seq[episode] = first + len(records)
        return self._put("episode", episode, first, records, source, reward, metadata, time.time())

    def knows(self, episode: str) -> bool:
        """Whether `episode` has calls (queued or written) in this store."""
        return episode in self._seq

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued write is committed; StoreFailed once a write failed."""
        done = threading.Event()
        self._queue.put(("flush", done))
        if not done.wait(timeout_s):
            raise RuntimeError(f"trace store {self.path}: writes not committed within {timeout_s:.0f} s")
        self._raise_failure()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None
        self._conn.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def failure(self) -> Optional[StoreFailed]:
        if self.error is None:
            return None
        return StoreFailed(f"trace store {self.path}: a write failed ({self.error}); nothing more is recorded")

    def _raise_failure(self) -> None:
        failed = self.failure()
        if failed is not None:
            raise failed

    def _put(self, *item: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((future, *item))
        return future

    def _write_forever(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if item[0] == "flush":
                item[1].set()
                continue
            future, kind, *args = item
            if self.error is None:
                try:
                    with self._conn:  # one transaction: committed whole, or rolled back
                        {"call": self._write_call, "feedback": self._write_feedback,
                         "episode": self._write_episode}[kind](*args)
                except Exception as exc:  # noqa: BLE001 - a full disk, a value that is no JSON: every later write
                    self.error = exc
            failed = self.failure()
            if failed is None:
                future.set_result(None)
            else:
                future.set_exception(failed)

    def _write_episode(self, episode: str, first: int, records: list[CallRecord], source: str,
                       reward: Optional[float], metadata: Optional[dict[str, Any]], now: float) -> None:
        for i, record in enumerate(records):
            self._write_call(episode, first + i, record, source, "", now)
        if reward is not None:
            self._write_feedback(episode, reward, metadata, now)

    def _write_call(self, episode: str, seq: int, record: CallRecord, source: str, model: str, now: float) -> None:
        self._conn.execute("INSERT INTO episodes (id, created, updated, source, model) VALUES (?, ?, ?, ?, ?) "
                           "ON CONFLICT(id) DO UPDATE SET updated = excluded.updated",
                           (episode, now, now, source, model))
        self._conn.execute(
            "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (episode, seq, record.target, now, json.dumps(record.messages, ensure_ascii=False),
             json.dumps(record.tools, ensure_ascii=False) if record.tools else None, record.prompt_text,
             _ids(record.prompt_ids), _ids(record.response_ids), _floats(record.logprobs), record.finish_reason,
             record.response_text, json.dumps(record.tool_call_errors, ensure_ascii=False),
             json.dumps(record.usage), json.dumps(record.sampling)))

    def _write_feedback(self, episode: str, reward: float, metadata: Optional[dict[str, Any]], now: float) -> None:
        text = json.dumps(metadata, ensure_ascii=False) if metadata is not None else None
        self._conn.execute("INSERT INTO feedback (episode_id, created, reward, metadata) VALUES (?, ?, ?, ?)",
                           (episode, now, reward, text))
        # (the episode's metadata is its last feedback's, read from there: not stored twice)
        self._conn.execute("UPDATE episodes SET reward = ?, feedback = NULL, updated = ? WHERE id = ?",
                           (reward, now, episode))

    # -- reading -----------------------------------------------------------------------------------------------------
    def episodes(self) -> list[dict[str, Any]]:
        rows = self._conn.execute("SELECT e.id, e.created, e.updated, e.source, e.model, e.reward, "
                                  "(SELECT f.metadata FROM feedback f WHERE f.episode_id = e.id ORDER BY f.id DESC "
                                  "LIMIT 1), (SELECT COUNT(*) FROM calls c WHERE c.episode_id = e.id) FROM episodes e "
                                  "ORDER BY e.created, e.id").fetchall()
        return [{"id": r[0], "created": r[1], "updated": r[2], "source": r[3], "model": r[4], "reward": r[5],
                 "feedback": json.loads(r[6]) if r[6] else None, "calls": r[7]} for r in rows]

    def episode_model(self, episode: str) -> Optional[str]:
        """The model recorded with `episode` (None: no such episode)."""
        row = self._conn.execute("SELECT model FROM episodes WHERE id = ?", (episode,)).fetchone()
        return None if row is None else row[0]

    def calls(self, episode: str) -> list[CallRecord]:
        """The episode's calls in order, as CallRecords (what the model saw and produced, token for token)."""
        rows = self._conn.execute("SELECT agent, messages, tools, prompt_text, prompt_ids, response_ids, logprobs, "
                                  "finish_reason, response_text, tool_call_errors, usage, sampling FROM calls "
                                  "WHERE episode_id = ? ORDER BY seq", (episode,)).fetchall()
        return [CallRecord(target=r[0], messages=json.loads(r[1]), tools=json.loads(r[2]) if r[2] else None,
                           prompt_text=r[3], prompt_ids=_unids(r[4]), response_ids=_unids(r[5]),
                           logprobs=_unids(r[6], "f"), finish_reason=r[7], response_text=r[8],
                           tool_call_errors=json.loads(r[9]), usage=json.loads(r[10]), sampling=json.loads(r[11]))
                for r in rows]

    def feedback(self, episode: str) -> list[dict[str, Any]]:
        rows = self._conn.execute("SELECT created, reward, metadata FROM feedback WHERE episode_id = ? ORDER BY id",
                                  (episode,)).fetchall()
        return [{"created": r[0], "reward": r[1], "metadata": json.loads(r[2]) if r[2] else None} for r in rows]

