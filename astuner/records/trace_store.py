"""The trace store: model calls recorded outside training (`astuner serve`), token for token, grouped into episodes,
with the rewards given to them afterwards. One SQLite file (Python's sqlite3: a real database that any SQLite
client reads, with transactions, WAL journaling and no server to run, rather than a file format of our own).

Writing: one writer per store, a thread of its own fed by a queue, so the server's loop never waits on the disk
and every call is one transaction (a reader never sees half a call). Reading: any number of readers, each with its
own connection, while the writer writes (WAL). `TraceStore.open_for_writing` refuses a file another process
writes to (a lock file beside it).

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

import json
import os
import queue
import sqlite3
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any, Optional

from astuner.errors import DataError
from astuner.schema.calls import CallRecord

SCHEMA_VERSION = 1
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


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA foreign_keys = ON")
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        return conn
    except sqlite3.DatabaseError as exc:
        raise DataError(f"trace store {path}: not a trace store, or not readable ({exc})") from None


def _refuse_foreign(path: Path) -> None:
    """A file that is some other program's SQLite database (tables, none of them `meta`) is not made a store."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    conn = _connect(path, readonly=True)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise DataError(f"trace store {path}: not a trace store, or not readable ({exc})") from None
    finally:
        conn.close()
    if tables and "meta" not in tables:
        raise DataError(f"trace store {path}: another program's SQLite database (tables: "
                        f"{', '.join(sorted(tables)[:6])}), not a trace store; name a new file")


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise DataError(f"trace store {path}: not a trace store ({exc})") from None
    if row is None:
        raise DataError(f"trace store {path}: no schema_version in its meta table; not a trace store")
    if int(row[0]) > SCHEMA_VERSION:
        raise DataError(f"trace store {path}: schema version {row[0]}, newer than this astuner's "
                        f"{SCHEMA_VERSION}; upgrade astuner to read it")


class TraceStore:
    """A store opened for reading (`TraceStore.read(path)`), or for writing (`open_for_writing`), whose writes go
    through `add_call` / `add_feedback` to its writer thread; `flush()` waits until they are on disk."""

    def __init__(self, path: Path, conn: sqlite3.Connection, writer: bool):
        self.path, self._conn, self.writer = path, conn, writer
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._lock_path: Optional[Path] = None
        self.error: Optional[BaseException] = None  # the writer's failure (a full disk): later writes raise it
        self._seq: dict[str, int] = {}  # episode -> its next call's seq (this writer's)

    # -- opening -------------------------------------------------------------------------------------------------
    @classmethod
    def open_for_writing(cls, path: Path | str, model: str = "") -> "TraceStore":
        path = Path(path)
        if path.parent and not path.parent.is_dir():
            raise DataError(f"--store {path}: its folder {path.parent} does not exist")
        lock = path.with_name(path.name + ".writer")
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pid = lock.read_text().strip() if lock.is_file() else "?"
            if pid.isdigit() and not _alive(int(pid)):
                lock.unlink(missing_ok=True)  # its writer died without cleaning up
                return cls.open_for_writing(path, model)
            raise DataError(f"trace store {path}: another process (pid {pid}) writes to it (an `astuner serve`?); "
                            f"one writer per store: stop it first, or give a served store its rewards through "
                            f"POST /v1/feedback (readers need no lock)") from None
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        try:
            _refuse_foreign(path)  # before anything is written to it (WAL journaling is a write)
            conn = _connect(path, readonly=False)
        except DataError:
            lock.unlink(missing_ok=True)
            raise
        try:
            conn.executescript(SCHEMA)
            found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if found is None:
                conn.executemany("INSERT INTO meta VALUES (?, ?)", [("schema_version", str(SCHEMA_VERSION)),
                                                                    ("created", str(time.time())), ("model", model)])
                conn.commit()
            _check_version(conn, path)
        except (sqlite3.DatabaseError, DataError) as exc:
            conn.close()
            lock.unlink(missing_ok=True)
            if isinstance(exc, DataError):
                raise
            raise DataError(f"--store {path}: not a trace store ({exc})") from None
        store = cls(path, conn, writer=True)
        store._lock_path = lock
        store._seq = dict(conn.execute("SELECT episode_id, MAX(seq) + 1 FROM calls GROUP BY episode_id").fetchall())
        store._thread = threading.Thread(target=store._write_forever, name="astuner-trace-store", daemon=True)
        store._thread.start()
        return store

    @classmethod
    def read(cls, path: Path | str) -> "TraceStore":
        path = Path(path)
        if not path.is_file():
            raise DataError(f"trace store {path}: no such file")
        conn = _connect(path, readonly=True)
        _check_version(conn, path)
        return cls(path, conn, writer=False)

    # -- writing (through the writer thread) -----------------------------------------------------------------------
    def add_call(self, episode: str, record: CallRecord, source: str = "served", model: str = "") -> None:
        """Queue one call of `episode` (created with it when new)."""
        self._raise_failure()
        seq = self._seq.get(episode, 0)
        self._seq[episode] = seq + 1
        self._queue.put(("call", episode, seq, record, source, model, time.time()))

    def add_feedback(self, episode: str, reward: float, metadata: Optional[dict[str, Any]] = None) -> None:
        self._raise_failure()
        self._queue.put(("feedback", episode, float(reward), metadata, time.time()))

    def knows(self, episode: str) -> bool:
        """Whether `episode` has calls (queued or written) in this store."""
        return episode in self._seq

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued write is committed."""
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
        if self._lock_path is not None:
            self._lock_path.unlink(missing_ok=True)
            self._lock_path = None

    def _raise_failure(self) -> None:
        if self.error is not None:
            raise DataError(f"trace store {self.path}: a write failed ({self.error}); nothing more is recorded")

    def _write_forever(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if item[0] == "flush":
                item[1].set()
                continue
            if self.error is not None:
                continue
            try:
                with self._conn:  # one transaction: committed whole, or rolled back
                    if item[0] == "call":
                        self._write_call(*item[1:])
                    else:
                        self._write_feedback(*item[1:])
            except Exception as exc:  # noqa: BLE001 - a full disk, or a value that is no JSON: said by the next write
                self.error = exc

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
        self._conn.execute("UPDATE episodes SET reward = ?, feedback = ?, updated = ? WHERE id = ?",
                           (reward, text, now, episode))

    # -- reading -----------------------------------------------------------------------------------------------------
    def episodes(self) -> list[dict[str, Any]]:
        rows = self._conn.execute("SELECT e.id, e.created, e.updated, e.source, e.model, e.reward, e.feedback, "
                                  "(SELECT COUNT(*) FROM calls c WHERE c.episode_id = e.id) FROM episodes e "
                                  "ORDER BY e.created, e.id").fetchall()
        return [{"id": r[0], "created": r[1], "updated": r[2], "source": r[3], "model": r[4], "reward": r[5],
                 "feedback": json.loads(r[6]) if r[6] else None, "calls": r[7]} for r in rows]

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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
