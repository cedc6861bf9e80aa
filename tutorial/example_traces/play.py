"""The main job's sensor agent in use: the openai-SDK agent (tutorial/example_openai_agent/sdk_agent.py) plays the
training tasks against an `astuner serve` endpoint, as a deployed agent would (its own client, a session id per
episode), and each episode is rated through the feedback API (1 when its answer is the sensor's reading, else 0),
as a user's verdict would be.

    python tutorial/example_traces/play.py --base-url http://127.0.0.1:8000/v1 --key KEY --episodes 400

`--unrated` sends no feedback: the episodes are rated afterwards from their conversations (`astuner traces judge`
with trace_judge.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "example_openai_agent"))
from sdk_agent import solve  # noqa: E402

from astuner.serve import FeedbackRefused, send_feedback_async  # noqa: E402
from astuner.task_judge.math_answer import answers_match, extract_answer  # noqa: E402

TASKS = Path(__file__).resolve().parents[1] / "example_agent_cpu" / "train.jsonl"


def wait_for_server(base_url: str, key: str, wait_s: float) -> None:
    """Until `astuner serve` answers at `base_url` (it loads its model first: seconds to minutes); SystemExit with
    one line when it does not within `wait_s` or refuses the key."""
    import time

    import httpx

    deadline, said = time.monotonic() + wait_s, ""
    while True:
        try:
            response = httpx.get(f"{base_url.rstrip('/')}/models", headers={"Authorization": f"Bearer {key}"},
                                 timeout=10)
            if response.status_code == 401:
                raise SystemExit(f"play.py: {base_url} refuses the key (HTTP 401): give the key astuner serve uses")
            if response.status_code == 200:
                return
            said = f"HTTP {response.status_code}"
        except httpx.TransportError as exc:
            said = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise SystemExit(f"play.py: no astuner serve answers at {base_url} after {wait_s:.0f} s ({said}); "
                             f"start it first, or wait longer: --wait-s")
        time.sleep(1)


async def play(base_url: str, key: str, episodes: int, concurrency: int, rate: bool = True) -> float:
    tasks = [json.loads(line) for line in TASKS.read_text().splitlines()]
    limit = asyncio.Semaphore(concurrency)
    rewards: list[float] = []

    async def one(i: int) -> None:
        task = tasks[i % len(tasks)]
        session = f"episode-{i}"
        async with limit:
            try:
                answer = await solve(task["question"], lambda: str(task["reading"]), base_url, key,
                                     headers={"X-Session-Id": session})
            except Exception as exc:  # noqa: BLE001 - a failed episode is rated 0, as a user would
                print(f"{session}: {type(exc).__name__}: {exc}", file=sys.stderr)
                answer = ""
            found = extract_answer(answer)
            reward = float(found is not None and answers_match(found, str(task["answer"])))
            try:
                if rate:
                    await send_feedback_async(base_url, key, session, reward)
            except FeedbackRefused as exc:  # no calls (it failed before its first reply), or no server answered
                print(f"{session}: {exc}", file=sys.stderr)
        rewards.append(reward)

    await asyncio.gather(*(one(i) for i in range(episodes)))
    return sum(rewards) / len(rewards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--unrated", action="store_true",
                        help="send no feedback (the episodes are judged afterwards: astuner traces judge)")
    parser.add_argument("--wait-s", type=float, default=600.0,
                        help="how long to wait for the server to answer first (it loads its model: default 600)")
    args = parser.parse_args()
    wait_for_server(args.base_url, args.key, args.wait_s)
    rate = asyncio.run(play(args.base_url, args.key, args.episodes, args.concurrency, not args.unrated))
    print(f"{args.episodes} episodes played{'' if args.unrated else ' and rated'}: success {rate:.3f}")


if __name__ == "__main__":
    main()
