"""Reference environment service: a number-guessing text game over astuner's env-service protocol.

Each task hides an integer in [1, 100] (fixed by its task id). The agent answers with a number; the
environment replies "higher", "lower" or "correct". The episode ends when the agent is right or after
`--max-steps` guesses; evaluate() gives reward 1.0 for a solved game, else 0.0.

    python tutorial/example_env_service/text_env_server.py --host 127.0.0.1 --port 8080

Only the standard library is used. It prints `listening on http://HOST:PORT` once it is ready
(`--port 0` picks a free port).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENV_TYPE = "guess_number"
SPLITS = {"train": 64, "val": 16}
QUERY = ("I am thinking of an integer between 1 and 100. Guess it: reply with one number. "
         "After each guess I will say 'higher', 'lower' or 'correct'.")


class Game:
    def __init__(self, task_id: str, max_steps: int):
        self.secret = random.Random(f"guess_number:{task_id}").randint(1, 100)
        self.max_steps = max_steps
        self.steps = 0
        self.solved = False

    def step(self, text: str) -> dict:
        self.steps += 1
        numbers = re.findall(r"-?\d+", text)
        if not numbers:
            reply = "Please reply with a single integer."
        else:
            guess = int(numbers[-1])
            if guess == self.secret:
                self.solved, reply = True, "correct"
            else:
                reply = "higher" if guess < self.secret else "lower"
        done = self.solved or self.steps >= self.max_steps
        return {"observation": {"role": "user", "content": reply}, "reward": 1.0 if self.solved else 0.0,
                "done": done, "info": {"steps": self.steps}}


class EnvState:
    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        self.games: dict[str, Game] = {}
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    state: EnvState

    def log_message(self, format, *args):  # keep the console quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok", "env_types": [ENV_TYPE]})
        else:
            self._send(404, {"error": f"no endpoint GET {self.path}"})

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": "the body is not JSON"})
            return
        handler = getattr(self, "post_" + self.path.strip("/"), None)
        if handler is None:
            self._send(404, {"error": f"no endpoint POST {self.path}"})
            return
        try:
            self._send(200, handler(body))
        except KeyError as exc:
            self._send(400, {"error": f"missing or unknown {exc.args[0]}"})
        except ValueError as exc:
            self._send(400, {"error": str(exc)})

    def _check_env_type(self, body: dict) -> None:
        if body["env_type"] != ENV_TYPE:
            raise ValueError(f"unknown env_type {body['env_type']!r}; this service runs {ENV_TYPE!r}")

    def post_task_ids(self, body: dict) -> dict:
        self._check_env_type(body)
        split = body["split"]
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
        return {"task_ids": [f"{split}_{i}" for i in range(SPLITS[split])]}

    def post_create(self, body: dict) -> dict:
        self._check_env_type(body)
        instance_id = body["instance_id"]
        with self.state.lock:
            self.state.games[instance_id] = Game(body["task_id"], self.state.max_steps)
        return {"instance_id": instance_id, "query": QUERY,
                "init_messages": [{"role": "user", "content": QUERY}], "info": {"max_steps": self.state.max_steps}}

    def post_step(self, body: dict) -> dict:
        game = self.state.games[body["instance_id"]]
        return game.step(str(body["action"].get("content", "")))

    def post_evaluate(self, body: dict) -> dict:
        game = self.state.games[body["instance_id"]]
        return {"reward": 1.0 if game.solved else 0.0, "is_success": game.solved, "info": {"steps": game.steps}}

    def post_release(self, body: dict) -> dict:
        with self.state.lock:
            return {"released": self.state.games.pop(body["instance_id"], None) is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--max-steps", type=int, default=7)
    args = parser.parse_args()
    Handler.state = EnvState(args.max_steps)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
