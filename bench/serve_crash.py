"""`kill -9` of `astuner serve` under concurrent load: every call answered 200 and every feedback answered
`"recorded": true` must be in the store afterwards (replies and acknowledgements are sent only once their rows
are committed). Each trial: a new store, `--clients` sessions calling at once (a reward after each call), the
server killed with SIGKILL once `--kill-after` calls are answered (each trial a little later than the one
before, so the kill lands at different points of the writes).

    python bench/serve_crash.py [--trials 10] [--clients 16] [--kill-after 40]

The last line states the goal's condition over all trials: answered calls and feedback lost, 0 each."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from astuner.model.tiny_model import build_tiny_model  # noqa: E402
from tests.serve.test_serve_store import crash_trial  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--kill-after", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "model", seed=0)
        totals = {"answered_calls": 0, "answered_feedback": 0, "lost_calls": 0, "sessions_losing_feedback": 0}
        for trial in range(args.trials):
            result = crash_trial(model, Path(tmp) / f"trial{trial}", args.clients, args.kill_after + 3 * trial)
            print(f"trial {trial + 1}: {result}", flush=True)
            for name, value in result.items():
                totals[name] += value
    ok = totals["lost_calls"] == 0 and totals["sessions_losing_feedback"] == 0
    print(f"{args.trials} trials of kill -9 under {args.clients} concurrent sessions: {totals['answered_calls']} calls "
          f"answered 200, {totals['lost_calls']} of them missing from the store; {totals['answered_feedback']} "
          f"feedbacks answered recorded, sessions missing one: {totals['sessions_losing_feedback']}; goal (0 lost): "
          f"{'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
