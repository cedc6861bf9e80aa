"""Write the tiny CPU demo's tasks: "What digit comes after N?" -> (N + 1) mod 10.

    python tutorial/example_tiny_cpu/prepare_data.py    # writes train.jsonl and val.jsonl beside this file
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TEMPLATES = ["What digit comes after {n} ?", "Which digit follows {n} ?", "Name the digit after {n} ."]


def rows(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        n = rng.randrange(10)
        out.append({"task_id": f"{seed}-{i}", "question": rng.choice(TEMPLATES).format(n=n),
                    "answer": str((n + 1) % 10)})
    return out


def main() -> None:
    here = Path(__file__).resolve().parent
    for name, count, seed in (("train.jsonl", 240, 1), ("val.jsonl", 60, 2)):
        with open(here / name, "w", encoding="utf-8") as fh:
            for row in rows(count, seed):
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
