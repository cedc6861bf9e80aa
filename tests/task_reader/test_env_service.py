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
        EnvServiceReader(url, "guess_number", "train", None, timeout_s=2).train_tasks()


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
            EnvServiceClient(url, timeout_s=0.5).task_ids("guess_number", "train")
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()
