"""`astuner serve` and its store under failure, as the command runs (a subprocess, the real openai SDK and httpx as
clients): a reply and a feedback's `"recorded": true` are sent only once their rows are committed, so `kill -9`
under concurrent load loses nothing answered; a full disk is answered 503 in OpenAI's shape naming the store, and
the command stops with one line."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from astuner.errors import DataError
from astuner.records.trace_store import TraceStore

KEY = "sk-serve-store-test"
MESSAGES = [{"role": "user", "content": "Read the sensor."}]


def start_serve(model_dir: Path, store: Path, preexec=None) -> tuple[subprocess.Popen, str]:
    """`astuner serve` on `store`; the process and its /v1 URL once it serves."""
    env = {**os.environ, "ASTUNER_SERVE_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "astuner", "serve", str(model_dir), "--store", str(store),
                             "--port", "0", "--max-tokens", "8"], stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=preexec)
    lines: list[str] = []
    while not any(line.startswith("astuner: serving") for line in lines):
        line = proc.stderr.readline()
        assert line, "".join(lines)
        lines.append(line)
    return proc, re.search(r"at (http://\S+/v1)", lines[-1]).group(1)


def chat(base_url: str, session: str, timeout: float = 120.0) -> httpx.Response:
    return httpx.post(f"{base_url}/chat/completions", json={"model": "tiny", "messages": MESSAGES},
                      headers={"Authorization": f"Bearer {KEY}", "X-Session-Id": session}, timeout=timeout)


def feedback(base_url: str, session: str, reward: float) -> httpx.Response:
    return httpx.post(f"{base_url}/feedback", json={"episode": session, "reward": reward},
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


def copy_store(store: Path, to: Path) -> TraceStore:
    """The store as a crash (or a full disk) left it, copied with its write-ahead log and read there."""
    to.mkdir()
    for suffix in ("", "-wal"):
        if Path(f"{store}{suffix}").is_file():
            shutil.copy(f"{store}{suffix}", to / f"{store.name}{suffix}")
    return TraceStore.read(to / store.name)


def crash_trial(model_dir: Path, folder: Path, clients: int = 6, kill_after: int = 24) -> dict[str, int]:
    """`astuner serve` on a new store in `folder`, `clients` sessions calling it at once (each call followed by a
    reward), killed with SIGKILL once `kill_after` calls are answered; what was answered and what of it the store
    lacks."""
    store = folder / "traces.db"
    folder.mkdir(parents=True)
    proc, base_url = start_serve(model_dir, store)
    answered: dict[str, int] = {}
    rewarded: dict[str, list[float]] = {}
    lock = threading.Lock()

    def client(session: str) -> None:
        calls = 0
        try:
            while True:
                if chat(base_url, session).status_code != 200:
                    return
                calls += 1
                with lock:
                    answered[session] = calls
                reply = feedback(base_url, session, float(calls))
                if reply.status_code != 200 or reply.json().get("recorded") is not True:
                    return
                with lock:
                    rewarded.setdefault(session, []).append(float(calls))
        except httpx.TransportError:  # the server is gone
            return

    threads = [threading.Thread(target=client, args=(f"s{n}",)) for n in range(clients)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 300
    while sum(answered.values()) < kill_after and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    for thread in threads:
        thread.join(timeout=120)
    assert sum(answered.values()) >= kill_after, proc.stderr.read()[-2000:]
    reader = copy_store(store, folder / "copy")
    lost_calls = sum(max(0, calls - len(reader.calls(session))) for session, calls in answered.items())
    lost_feedback = sum(1 for session, rewards in rewarded.items()
                        if [f["reward"] for f in reader.feedback(session)][:len(rewards)] != rewards)
    TraceStore.open_for_writing(store).close()  # the killed writer's lock is taken over
    return {"answered_calls": sum(answered.values()), "answered_feedback": sum(map(len, rewarded.values())),
            "lost_calls": lost_calls, "sessions_losing_feedback": lost_feedback}


def test_kill_9_under_concurrent_load_loses_no_answered_call_or_feedback(tiny_model_dir, tmp_path):
    """Two trials (`bench/serve_crash.py` runs ten): 6 clients, each a session of calls with a reward after each,
    the server killed with SIGKILL once 24 calls are answered; every call answered 200 and every feedback answered
    `"recorded": true` is in the store (a reply sent before its row was committed is lost here), and the store
    opens for writing again."""
    for trial in range(2):
        result = crash_trial(tiny_model_dir, tmp_path / f"t{trial}")
        assert result["lost_calls"] == result["sessions_losing_feedback"] == 0, (trial, result)


def _small_disk(tmp_path: Path):
    """A folder on a 1 MiB tmpfs (root: a real full disk) and no preexec; else a folder whose files may not grow
    past 1 MiB (RLIMIT_FSIZE, SIGXFSZ ignored: the write fails as on a full disk)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                                            capture_output=True).returncode == 0:
        return disk, None, lambda: subprocess.run(["umount", "-l", str(disk)], capture_output=True)

    def limited() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    return disk, limited, lambda: None


def test_a_full_disk_is_answered_503_naming_the_store_and_serve_stops_in_one_line(tiny_model_dir, tmp_path):
    disk, preexec, unmount = _small_disk(tmp_path)
    store = disk / "traces.db"
    try:
        proc, base_url = start_serve(tiny_model_dir, store, preexec)
        try:
            answered, refused = 0, None
            for _ in range(3000):
                reply = chat(base_url, "full")
                if reply.status_code != 200:
                    refused = reply
                    break
                answered += 1
            assert refused is not None and refused.status_code == 503, refused
            error = refused.json()["error"]  # OpenAI's error shape: the SDK raises it as an APIStatusError
            assert error["type"] == "server_error" and error["code"] == "store_failed", error
            assert f"trace store {store}: a write failed (" in error["message"], error
            try:  # nothing more is generated: every later request is refused (or finds the server gone)
                assert chat(base_url, "later", timeout=30).status_code == 503
                assert feedback(base_url, "full", 1.0).status_code == 503
            except httpx.TransportError:
                pass
            code = proc.wait(timeout=120)
            err = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
        assert code == 2, err[-2000:]
        assert "Traceback" not in err and "Exception in ASGI application" not in err, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"astuner: error: trace store {store}: a write failed (") and \
            last.endswith("astuner serve stopped (the calls answered before are in the store)"), err[-2000:]
        assert answered >= 1 and len(copy_store(store, tmp_path / "copy").calls("full")) >= answered
    finally:
        unmount()


def test_a_reply_and_a_feedback_wait_for_their_rows_commit(tiny_model_dir, tmp_path):
    """With a writer slowed down (0.5 s a write), the reply (whole and streamed) and the feedback's answer reach the
    client only once a reader sees their rows."""
    from tests.serve.test_serve import KEY as SERVE_KEY, client, serving

    gateway, _, store = serving(tiny_model_dir, tmp_path / "traces.db")
    try:
        for name in ("_write_call", "_write_feedback"):
            write = getattr(store, name)

            def slow(*args, _write=write):
                time.sleep(0.5)
                _write(*args)

            setattr(store, name, slow)
        reader = TraceStore.read(store.path)
        sdk = client(gateway, "slow")
        sdk.chat.completions.create(model="tiny", messages=MESSAGES)
        assert len(reader.calls("slow")) == 1
        for _ in sdk.chat.completions.create(model="tiny", messages=MESSAGES, stream=True):
            pass
        assert len(reader.calls("slow")) == 2
        answer = httpx.post(f"{gateway.base_url}/feedback", json={"episode": "slow", "reward": 1.0},
                            headers={"Authorization": f"Bearer {SERVE_KEY}"}, timeout=120)
        assert answer.json()["recorded"] is True
        assert [f["reward"] for f in reader.feedback("slow")] == [1.0]
    finally:
        gateway.stop()
        store.close()


def test_once_the_store_has_failed_nothing_more_is_generated(tiny_model_dir, tmp_path):
    """After a write failed, a call is answered 503 (store_failed) before the engine is asked for anything, and a
    feedback too; `failed` is set for the command to stop."""
    from tests.serve.test_serve import KEY as SERVE_KEY, client, serving

    gateway, engine, store = serving(tiny_model_dir, tmp_path / "traces.db")
    try:
        sdk = client(gateway, "s")
        sdk.chat.completions.create(model="tiny", messages=MESSAGES)
        generated = len(engine.results)
        store.add_feedback("s", 1.0, {"x": object()})  # a write that fails (no JSON), as a full disk's would
        with pytest.raises(DataError):
            store.flush()
        assert httpx.post(f"{gateway.base_url}/feedback", json={"episode": "s", "reward": 1.0}, timeout=60,
                          headers={"Authorization": f"Bearer {SERVE_KEY}"}).status_code == 503
        assert gateway.failed.is_set() and "a write failed" in gateway.failure
        reply = httpx.post(f"{gateway.base_url}/chat/completions", json={"model": "tiny", "messages": MESSAGES},
                           headers={"Authorization": f"Bearer {SERVE_KEY}", "X-Session-Id": "s"}, timeout=60)
        assert reply.status_code == 503 and reply.json()["error"]["code"] == "store_failed"
        assert len(engine.results) == generated
    finally:
        gateway.stop()
        store.close()


def test_serve_mistakes_are_one_line_each(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """A store path that names no file, context sizes that cannot be, a port taken: one line each naming serve's
    own options (exit 2), nothing left behind."""
    import socket

    from tests.conftest import run_cli

    monkeypatch.setenv("ASTUNER_SERVE_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    base = ["serve", str(tiny_model_dir), "--port", "0"]
    for args, needle in [(["--store", ""], "--store .: a folder, not a file"),  # '' is the working folder
                         (["--store", "."], "--store .: a folder, not a file"),
                         (["--store", "adir"], "--store adir: a folder, not a file"),
                         (["--store", "t.db", "--max-model-len", "0"],
                          "--max-model-len 0 leaves no room for a prompt beside replies of --max-tokens 1024"),
                         (["--store", "t.db", "--max-tokens", "0"], "--max-tokens must be at least 1, got 0"),
                         (["--store", "t.db", "--max-model-len", "99999999"],
                          "--max-model-len 99999999 is beyond the model's 4096 positions")]:
        code, _, err = run_cli(base + args, capsys)
        lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
        assert code == 2 and len(lines) == 1 and needle in lines[0], (args, err[-1500:])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, _, err = run_cli(["serve", str(tiny_model_dir), "--store", "p.db", "--port", str(port)], capsys)
    lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
    assert code == 2 and len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], err[-1500:]
    assert "set --host / --port" in lines[0] and "openai_gateway" not in lines[0]
    assert not list(tmp_path.glob("p.db*")) or [p.name for p in tmp_path.glob("p.db*")] == ["p.db.log"]  # no store
