"""The trace store's file (astuner.records.trace_store): opening it with SQLite, what is checked before anything is
written to it (read-only: SQLite, `PRAGMA quick_check`, a store's tables and columns, its schema version), and the
one writer's lock (`flock` on FILE.writer)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path
from typing import Optional

from astuner.errors import DataError

SCHEMA_VERSION = 1
TABLES = {"meta": ["key", "value"],
          "episodes": ["id", "created", "updated", "source", "model", "reward", "feedback"],
          "calls": ["episode_id", "seq", "agent", "created", "messages", "tools", "prompt_text", "prompt_ids",
                    "response_ids", "logprobs", "finish_reason", "response_text", "tool_call_errors", "usage",
                    "sampling"],
          "feedback": ["id", "episode_id", "created", "reward", "metadata"]}


def connect(path: Path, readonly: bool) -> sqlite3.Connection:
    uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
    conn = None
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA foreign_keys = ON")
        if readonly:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # opens the file: read-only media below
        else:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        return conn
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.OperationalError) and readonly and not os.access(path.parent, os.W_OK):
            # read-only media: a WAL store's reader cannot make its shared-memory file; the file is read as it is
            return sqlite3.connect(f"file:{path}?immutable=1", uri=True, check_same_thread=False)
        raise DataError(f"trace store {path}: not a trace store, or not readable ({exc})") from None


def check_schema(conn: sqlite3.Connection, path: Path, deep: bool = False) -> bool:
    """Whether the file holds a store (False: an SQLite file with no table, made a store on writing); DataError for
    anything else, found by reading only: another program's tables, a table of other columns, no or a newer schema
    version, and (`deep`: before writing) a damaged file (`PRAGMA quick_check`)."""
    try:
        if deep:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)").fetchall()]
            if problems != ["ok"]:
                raise DataError(f"trace store {path}: the file is damaged (SQLite's quick_check: "
                                f"{'; '.join(problems)[:200]}); nothing was written to it: restore it, or name a new "
                                f"file")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        tables.discard("sqlite_sequence")
        if not tables:
            return False
        if tables - set(TABLES) or "meta" not in tables:
            raise DataError(f"trace store {path}: another program's SQLite database (tables: "
                            f"{', '.join(sorted(tables)[:6])}), not a trace store; name a new file")
        for table in tables:
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            if columns != TABLES[table]:
                raise DataError(f"trace store {path}: its table {table} has columns {', '.join(columns)[:120]}, not "
                                f"a trace store's; name a new file")
        check_version(conn, path)
    except sqlite3.DatabaseError as exc:
        raise DataError(f"trace store {path}: not a trace store, or not readable ({exc})") from None
    return True


def check_version(conn: sqlite3.Connection, path: Path) -> None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or not str(row[0]).isdigit():
        raise DataError(f"trace store {path}: no schema version in its meta table; not a trace store")
    if int(row[0]) > SCHEMA_VERSION:
        raise DataError(f"trace store {path}: schema version {row[0]}, newer than this astuner's "
                        f"{SCHEMA_VERSION}; upgrade astuner to read it")


def check_before_writing(path: Path) -> None:
    """The file at `path` checked read-only before a writer opens it (an absent or empty file is new)."""
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return
    if not path.is_file():
        raise DataError(f"--store {path}: not a file")
    with open(path, "rb") as fh:
        if fh.read(16) != b"SQLite format 3\x00":
            raise DataError(f"trace store {path}: not a trace store (not an SQLite file); name a new file")
    conn = connect(path, readonly=True)
    try:
        check_schema(conn, path, deep=True)
    finally:
        conn.close()


class WriterLock:
    """The one-writer lock of a store: `flock` on FILE.writer, which holds its holder's pid."""

    def __init__(self, store: Path):
        self.path = store.with_name(store.name + ".writer")
        self.fd: Optional[int] = None

    def take(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise DataError(f"trace store {self.path.with_suffix('')}: another process (pid {holder}) writes to "
                                f"it (an `astuner serve`?; it holds {self.path}); one writer per store: stop it "
                                f"first, or give a served store its rewards through POST /v1/feedback (readers need "
                                f"no lock)") from None
            try:  # a writer that closed meanwhile removed the file this lock is on: take the one at the path now
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # while still held: an opener waiting on this file takes the next one
            os.close(self.fd)
            self.fd = None
