"""Write the signal game's tasks: a secret digit per row, with the words the three agents' prompts use (a tiny
model's word-level tokenizer is trained on the rows, so they must appear there).

    python tutorial/example_multi_agent_cpu/prepare_data.py    # writes train.jsonl and val.jsonl beside this file
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HINTER = "Secret is {secret} . Give the hint ."
NOISE = "Say any digit ."
GUESSER = "Hint is {hint} . Noise is {noise} . Name the secret ."


def rows(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"task_id": f"{seed}-{i}", "secret": str(rng.randrange(10)), "hinter_prompt": HINTER,
             "noise_prompt": NOISE, "guesser_prompt": GUESSER} for i in range(count)]


def main() -> None:
    here = Path(__file__).resolve().parent
    for name, count, seed in (("train.jsonl", 200, 1), ("val.jsonl", 50, 2)):
        with open(here / name, "w", encoding="utf-8") as fh:
            for row in rows(count, seed):
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
