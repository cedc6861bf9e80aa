"""Writes the sensor demo's tasks: each asks what one sensor reads; the reading (100-999, always three
digits) is hidden from the model and only the `read_sensor` tool reports it. Seeded, so the committed files
are reproducible:

    python tutorial/example_agent_cpu/prepare_data.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(seed: int = 0, train: int = 200, val: int = 40) -> None:
    rng = random.Random(seed)
    ids = rng.sample(range(100, 1000), train + val)
    for name, chunk in (("train", ids[:train]), ("val", ids[train:])):
        with open(HERE / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            for i, sensor in enumerate(chunk):
                reading = rng.randint(100, 999)
                fh.write(json.dumps({"task_id": f"{name}-{i}", "question": f"What does sensor S{sensor} read?",
                                     "answer": str(reading), "reading": reading}) + "\n")


if __name__ == "__main__":
    main()
