"""`env_service` reader and client against the tutorial's reference server on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from astuner.env_service import EnvServiceClient
from astuner.errors import EnvServiceError
from astuner.task_reader.env_service import EnvServiceReader
from tests.conftest import REPO_ROOT

SERVER = REPO_ROOT / "tutorial" / "example_env_service" / "text_env_server.py"


@pytest.fixture(scope="module")
def env_url():
    proc = subprocess.Popen([sys.executable, str(SERVER), "--host", "127.0.0.1", "--port", "0", "--max-steps", "7"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        yield line.split("listening on ", 1)[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_reader_lists_tasks_per_split(env_url):
    reader = EnvServiceReader(env_url, "guess_number", "train", "val", timeout_s=5)
    train, val = reader.train_tasks(), reader.val_tasks()
    assert len(train) == 64 and len(val) == 16
    assert train[0].task_id == "train_0" and train[0].env_type == "guess_number"
    assert train[0].metadata == {"env_url": env_url, "split": "train"}


def test_episode_protocol_create_step_evaluate_release(env_url):
    client = EnvServiceClient(env_url, timeout_s=5)
    assert client.health()["env_types"] == ["guess_number"]
    created = client.create("guess_number", "train_3", "inst-1")
    assert created["instance_id"] == "inst-1" and "between 1 and 100" in created["query"]
    low, high, answer = 1, 100, None
    for _ in range(7):  # binary search needs at most 7 guesses on 1..100
        guess = (low + high) // 2
        result = client.step("inst-1", {"role": "assistant", "content": f"My guess is {guess}"})
        reply = result["observation"]["content"]
        if reply == "correct":
            answer = guess
            break
        low, high = (guess + 1, high) if reply == "higher" else (low, guess - 1)
    assert answer is not None and result["done"] is True
    verdict = client.evaluate("inst-1")
    assert verdict == {"reward": 1.0, "is_success": True, "info": verdict["info"]}
    assert client.release("inst-1") is True
    assert client.release("inst-1") is False


def test_game_ends_unsolved_after_max_steps(env_url):
    client = EnvServiceClient(env_url, timeout_s=5)
    client.create("guess_number", "val_0", "inst-2")
    results = [client.step("inst-2", {"role": "assistant", "content": "no idea"}) for _ in range(7)]
    assert [r["done"] for r in results] == [False] * 6 + [True]
    assert results[0]["observation"]["content"] == "Please reply with a single integer."
    assert client.evaluate("inst-2")["reward"] == 0.0


def test_service_errors_name_the_url(env_url):
    client = EnvServiceClient(env_url, timeout_s=5)
    with pytest.raises(EnvServiceError, match=rf"{env_url}/task_ids answered HTTP 400: unknown env_type 'chess'"):
        client.task_ids("chess", "train")
    with pytest.raises(EnvServiceError, match="unknown split 'dev'"):
        EnvServiceReader(env_url, "guess_number", "dev", None).train_tasks()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_names_url():
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(EnvServiceError, match=rf"cannot reach the environment service at {url}/task_ids"):
        EnvServiceReader(url, "guess_number", "train", None, timeout_s=2, retry_backoff_s=0.01).train_tasks()
    with pytest.raises(EnvServiceError, match=r"after 4 attempts"):  # 3 retries, then the error
        EnvServiceClient(url, timeout_s=2, retries=3, retry_backoff_s=0.01).create("guess_number", "train_0")


def test_timeout_names_url_and_setting():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted = []
    stop = threading.Event()

    def accept_and_stay_silent():
        conn, _ = server.accept()
        accepted.append(conn)
        stop.wait(5)

    thread = threading.Thread(target=accept_and_stay_silent, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    try:
        with pytest.raises(EnvServiceError, match=rf"{url}/task_ids did not answer within 0.5s.*timeout_s"):
            EnvServiceClient(url, timeout_s=0.5, retries=0).task_ids("guess_number", "train")
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()


class _Flaky:
    """A service whose endpoints fail with a given status a given number of times, counting every request."""

    def __init__(self, failures: dict[str, tuple[int, int]]):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.failures, self.calls = dict(failures), {}
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                return

            def _answer(self):
                name = self.path.strip("/")
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                flaky.calls[name] = flaky.calls.get(name, 0) + 1
                status, times = flaky.failures.get(name, (200, 0))
                ok = flaky.calls[name] > times
                body = (b'{"task_ids": ["a"], "instance_id": "i", "query": "q", "observation": {}, "reward": 1}'
                        if ok else b'{"error": "busy"}')
                self.send_response(200 if ok else status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_retries_with_backoff_only_where_a_second_send_is_safe():
    flaky = _Flaky({"task_ids": (500, 2), "create": (503, 2), "step": (500, 5), "evaluate": (502, 9)})
    try:
        client = EnvServiceClient(flaky.url, timeout_s=5, retries=3, retry_backoff_s=0.01)
        assert client.task_ids("e", "train") == ["a"] and flaky.calls["task_ids"] == 3  # 500 twice, then ok
        assert client.create("e", "t")["instance_id"] == "i" and flaky.calls["create"] == 3  # 503: not processed
        with pytest.raises(EnvServiceError, match=rf"{flaky.url}/step answered HTTP 500: busy"):
            client.step("i", {"role": "assistant", "content": "x"})
        assert flaky.calls["step"] == 1  # a 500 from /step may have moved the environment: never sent twice
        with pytest.raises(EnvServiceError, match=rf"{flaky.url}/evaluate answered HTTP 502 \(after 4 attempts\)"):
            client.evaluate("i")
        assert flaky.calls["evaluate"] == 4
        none = EnvServiceClient(flaky.url, timeout_s=5, retries=0)
        flaky.calls.clear()
        flaky.failures["health"] = (503, 1)
        with pytest.raises(EnvServiceError, match="HTTP 503"):
            none.health()
        assert flaky.calls["health"] == 1
    finally:
        flaky.close()
